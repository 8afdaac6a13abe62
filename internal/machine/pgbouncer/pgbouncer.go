// Package pgbouncer starts a throwaway PgBouncer in front of a PostgreSQL
// server, in transaction or session mode, for the tests that prove sendonce
// works behind a pooler (producers, workers and migrations, every
// connection through it). It is a test kit, for internal use.
//
// The binary is the machine's (Debian's pgbouncer package, 1.18 on
// bookworm; sysdeps installs it when missing, see sysdeps.PgBouncer). PgBouncer refuses to run as root,
// so when the current user is root it runs as the "postgres" user, as
// pgcluster runs PostgreSQL (pgcluster.RunAsPostgres). It listens on a free loopback port and lets
// any client in (auth_type trust); it logs into the server as the server
// URL's user, with its password if it has one.
package pgbouncer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/machine/sysdeps"
)

// Mode is PgBouncer's pool_mode.
type Mode string

// The pool modes the tests run in. (PgBouncer's third, statement, refuses
// transactions of more than one statement and is no place for an outbox.)
const (
	// Transaction gives a client a server connection for one transaction
	// at a time: no session state survives a commit.
	Transaction Mode = "transaction"
	// Session gives a client one server connection for as long as it is
	// connected.
	Session Mode = "session"
)

// Options tune a PgBouncer.
type Options struct {
	// Mode is the pool mode (default Transaction).
	Mode Mode
	// PoolSize is default_pool_size: the server connections per database
	// and user (default 10 in transaction mode, so that server connections
	// are shared and reused, as in production; 150 in session mode, where
	// each client holds one for as long as it is connected).
	PoolSize int
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// Port is the loopback TCP port it listens on.
	Port int
	// Mode is its pool mode.
	Mode Mode
	// Dir holds its configuration and log.
	Dir string

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  strings.Builder
}

// Start starts a PgBouncer in front of the server at serverURL (a
// postgres:// URL); every database of that server is reachable through it
// by name. Stop it with Stop, which also removes its directory.
//
// It is long because it is one story told in order (the directory and its
// ownership, the config and the users file, the process run as postgres,
// the wait until it answers), each step undoing the ones before on failure.
func Start(ctx context.Context, serverURL string, opts Options) (*Bouncer, error) {
	out := io.Writer(os.Stderr)
	if opts.Logf != nil {
		out = pgcluster.LogWriter(opts.Logf)
	}
	bin, err := sysdeps.Ensure(ctx, sysdeps.PgBouncer, out)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	if opts.Mode == "" {
		opts.Mode = Transaction
	}
	if opts.Mode != Transaction && opts.Mode != Session {
		return nil, fmt.Errorf("pgbouncer: mode %q: want transaction or session", opts.Mode)
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = 10
		if opts.Mode == Session {
			opts.PoolSize = 150
		}
	}
	cfg, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return nil, errors.New("pgbouncer: the server URL does not parse")
	}

	dir, err := os.MkdirTemp("", "sendonce-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: create directory: %w", err)
	}
	cred, err := pgcluster.RunAsPostgres("PgBouncer", dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}

	// The server side: every database, as the URL's user. The client side:
	// trust, for the users in the auth file.
	server := fmt.Sprintf("host=%s port=%d user=%s", cfg.Host, cfg.Port, quote(cfg.User))
	if cfg.Password != "" {
		server += " password=" + quote(cfg.Password)
	}
	users := fmt.Sprintf("%q \"\"\n", cfg.User)
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(users), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: write users: %w", err)
	}

	var lastErr error
	for range 5 {
		port, err := pgcluster.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer: find a free port: %w", err)
		}
		b := &Bouncer{Port: port, Mode: opts.Mode, Dir: dir, done: make(chan struct{})}
		ini := strings.Join([]string{
			"[databases]",
			"* = " + server,
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			"listen_port = " + strconv.Itoa(port),
			"unix_socket_dir =",
			"auth_type = trust",
			"auth_file = " + filepath.Join(dir, "users.txt"),
			"pool_mode = " + string(opts.Mode),
			"default_pool_size = " + strconv.Itoa(opts.PoolSize),
			"max_client_conn = 5000",
			// A server that is down (the database-restart scenario) is
			// tried again after a second, not PgBouncer's default 15 s.
			"server_login_retry = 1",
			"ignore_startup_parameters = extra_float_digits",
			"pidfile = " + filepath.Join(dir, "pgbouncer.pid"),
			"",
		}, "\n")
		iniPath := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(iniPath, []byte(ini), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer: write configuration: %w", err)
		}
		if lastErr = b.start(ctx, bin, iniPath, cred); lastErr == nil {
			if opts.Logf != nil {
				opts.Logf("PgBouncer (%s mode, pool size %d) on 127.0.0.1:%d in front of %s:%d", opts.Mode, opts.PoolSize, port, cfg.Host, cfg.Port)
			}
			return b, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// start runs pgbouncer in the foreground and waits for its "process up"
// line, or for it to exit.
func (b *Bouncer) start(ctx context.Context, bin, ini string, cred *syscall.Credential) error {
	b.cmd = exec.Command(bin, ini)
	b.cmd.Dir = b.Dir
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	stderr, err := b.cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	b.cmd.Stdout = nil
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	up := make(chan struct{})
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			b.mu.Lock()
			b.log.WriteString(sc.Text() + "\n")
			b.mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "process up") {
				signalled = true
				close(up)
			}
		}
		_ = b.cmd.Wait()
	}()
	select {
	case <-up:
		return nil
	case <-b.done:
		return fmt.Errorf("pgbouncer: exited at start: %s", tail(b.Log(), 800))
	case <-ctx.Done():
		b.Stop()
		return fmt.Errorf("pgbouncer: start: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		b.Stop()
		return fmt.Errorf("pgbouncer: not up after 30s: %s", tail(b.Log(), 800))
	}
}

// Log is what PgBouncer has logged so far.
func (b *Bouncer) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// URL returns dbURL (a database of the server the bouncer is in front of)
// connecting through the bouncer instead: the same database, user and
// parameters, the bouncer's host and port.
func (b *Bouncer) URL(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("pgbouncer: want a postgres:// database URL")
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(b.Port)
	return u.String(), nil
}

// Stop shuts PgBouncer down at once (SIGTERM: its immediate shutdown; SIGINT
// would wait for every client's transaction) and removes its directory.
func (b *Bouncer) Stop() error {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	}
	return os.RemoveAll(b.Dir)
}

// ForTest starts a PgBouncer in the given mode in front of the server of
// dbURL for the test, stops it when the test ends (before the database is
// dropped, when dbURL was made earlier in the test), and returns dbURL
// through it.
func ForTest(t testing.TB, dbURL string, mode Mode) string {
	t.Helper()
	b := StartForTest(t, dbURL, Options{Mode: mode, Logf: t.Logf})
	through, err := b.URL(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return through
}

// StartForTest is Start for a test: it fails the test when PgBouncer
// cannot be had, and stops it when the test ends.
func StartForTest(t testing.TB, serverURL string, opts Options) *Bouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := Start(ctx, serverURL, opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Logf("pgbouncer: stop: %v", err)
		}
	})
	return b
}

// quote quotes a value of PgBouncer's connection strings (libpq's rules).
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
