// Package pgcluster starts a throwaway PostgreSQL server from the machine's
// own server binaries (initdb, pg_ctl), for the test suite, the demo and the
// benchmarks. PostgreSQL refuses to run as root, so when the current user is
// root the server runs as the "postgres" user.
//
// On that server, or on any other, CreateDatabase makes a database of the
// caller's own and Database.Drop removes it: the one way the tests (through
// internal/testkit/pgtest) and the benchmarks get a database.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sendonce/sendonce/internal/machine/sysdeps"
)

// Options tune a cluster.
type Options struct {
	// Durable keeps fsync and synchronous commit on, as a production server
	// would run. The default turns them off, which makes tests much faster and
	// loses nothing a test cares about.
	Durable bool

	// MaxConnections is the server's max_connections (default 200).
	MaxConnections int

	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	// URL connects as the superuser "postgres" to database "postgres".
	URL string
	// Port is the loopback TCP port the server listens on.
	Port int
	// Dir holds the data directory, the socket and the log.
	Dir string

	bin  string
	cred *syscall.Credential
	opts Options
}

// EnvBinDir names the directory holding initdb and pg_ctl, instead of
// looking for them: only that directory is searched.
const EnvBinDir = "SENDONCE_PG_BIN"

// Binaries is PostgreSQL's server package, as sysdeps installs it when
// initdb and pg_ctl are missing.
var Binaries = sysdeps.Dep{
	Name: "PostgreSQL's server binaries (initdb, pg_ctl)",
	Find: BinDir,
	Apt:  "postgresql",
	Brew: "postgresql@16",
}

// BinDir finds the directory holding initdb and pg_ctl: $SENDONCE_PG_BIN
// when set, else $PATH, /usr/lib/postgresql/*/bin (newest version first)
// and Homebrew's kegs.
func BinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
		return "", fmt.Errorf("no initdb and pg_ctl in %s=%s", EnvBinDir, d)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	sort.SliceStable(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and pg_ctl are neither on PATH nor under /usr/lib/postgresql/*/bin")
}

// EnsureBinDir is BinDir, but installs the distribution's PostgreSQL server
// package first when the binaries are missing (see package sysdeps), saying
// so on out. Its error names the one command to run when it cannot, and
// DATABASE_URL / TEST_DATABASE_URL as the way around it.
func EnsureBinDir(ctx context.Context, out io.Writer) (string, error) {
	dir, err := sysdeps.Ensure(ctx, Binaries, out)
	if err != nil {
		return "", fmt.Errorf("%w (or set DATABASE_URL / TEST_DATABASE_URL to a server you run)", err)
	}
	return dir, nil
}

func versionOf(dir string) int {
	name := filepath.Base(filepath.Dir(dir)) // "15", or "postgresql@16"
	v, _ := strconv.Atoi(name[strings.LastIndex(name, "@")+1:])
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises a new cluster in a fresh temporary directory and starts
// it on a free loopback port. Stop it with Stop, which also removes it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	out := io.Writer(os.Stderr)
	if opts.Logf != nil {
		out = LogWriter(opts.Logf)
	}
	bin, err := EnsureBinDir(ctx, out)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 200
	}
	c := &Cluster{bin: bin, opts: opts}

	dir, err := os.MkdirTemp("", "sendonce-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: create directory: %w", err)
	}
	c.Dir = dir
	if c.cred, err = RunAsPostgres("PostgreSQL", dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: chmod %s: %w", dir, err)
	}

	c.logf("initdb in %s", dir)
	if out, err := c.run(ctx, "initdb", "-D", c.dataDir(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: initdb: %w: %s", err, out)
	}
	if err := c.startOnFreePort(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *Cluster) startOnFreePort(ctx context.Context) error {
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return fmt.Errorf("pgcluster: find a free port: %w", err)
		}
		c.Port = port
		if lastErr = c.Start(ctx); lastErr == nil {
			c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return nil
		}
	}
	return lastErr
}

// Start starts a stopped cluster again on its port (after Crash or a stop).
func (c *Cluster) Start(ctx context.Context) error {
	settings := []string{
		"-p " + strconv.Itoa(c.Port),
		"-k " + c.Dir,
		"-c listen_addresses=127.0.0.1",
		"-c max_connections=" + strconv.Itoa(c.opts.MaxConnections),
	}
	if !c.opts.Durable {
		settings = append(settings, "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
	}
	c.logf("starting PostgreSQL on 127.0.0.1:%d", c.Port)
	out, err := c.run(ctx, "pg_ctl", "-D", c.dataDir(), "-l", filepath.Join(c.Dir, "server.log"), "-w", "-t", "60",
		"-o", strings.Join(settings, " "), "start")
	if err != nil {
		logTail, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		return fmt.Errorf("pgcluster: pg_ctl start: %w: %s %s", err, out, tail(logTail, 800))
	}
	return nil
}

// Crash stops the server at once, as a power cut would (pg_ctl stop -m
// immediate); Start replays the WAL.
func (c *Cluster) Crash(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.dataDir(), "-w", "stop", "-m", "immediate"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop -m immediate: %w: %s", err, out)
	}
	return nil
}

// Stop shuts the server down and removes its directory.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.run(ctx, "pg_ctl", "-D", c.dataDir(), "-w", "stop", "-m", "fast")
	if rmErr := os.RemoveAll(c.Dir); err == nil && rmErr != nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: stop: %w", err)
	}
	return nil
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	// pg_ctl start leaves the server running in the background with our
	// output pipes; let Wait return once pg_ctl itself has exited.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	return strings.TrimSpace(out.String()), err
}

// RunAsPostgres is the credential under which to run prog (PostgreSQL, or
// PgBouncer), which refuses to run as root: nil when the current user is
// not root; otherwise the "postgres" user's, and dir, where prog keeps its
// files, is handed to that user.
func RunAsPostgres(prog, dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and %s refuses root, but there is no \"postgres\" user to run it as (create one, or run as another user)", prog)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("chown %s: %w", dir, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// LogWriter passes what is written to it, line by line, to a Logf (as
// Options.Logf).
type LogWriter func(format string, args ...any)

// Write passes each non-empty line of p to w; it never fails.
func (w LogWriter) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		if line = strings.TrimRight(line, "\n"); line != "" {
			w("%s", line)
		}
	}
	return len(p), nil
}

// FreePort is a TCP port free on the loopback interface when it was asked
// for: the kernel's pick, closed again at once.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
