package integration

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// Flags of the suite. Each has an environment twin, so a CI job or a
// developer can set them without touching the go test command line.
var (
	flagSeed  = flag.Uint64("seed", 0, "random seed of the run (0: pick one and print it); env SENDONCE_SEED")
	flagSoak  = flag.Bool("soak", false, "soak run: multiply intents and kills (by 10, or by SENDONCE_SOAK when it is a number); env SENDONCE_SOAK")
	flagSlack = flag.Duration("slack", 400*time.Millisecond, "scheduling slack allowed above a wait the retry contract names; env SENDONCE_SLACK")
)

// suite holds what every scenario shares: the built command, the seed and
// the size of the run.
var suite struct {
	once     sync.Once
	bin      string // the built sendonce binary
	buildErr error
	dir      string // temporary directory of the run
	root     string // the module's root directory

	seed  uint64
	scale int
	slack time.Duration
}

// TestMain builds the command once and runs the scenarios one at a time,
// none with t.Parallel: each SIGKILLs, SIGSTOPs or restarts real processes
// (a database cluster among them) and several judge rates, pauses and
// replay times against the wall clock, so on a 2-core machine a scenario
// beside another would measure the other's load, not its own.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("integration: skipped in -short mode (the suite starts PostgreSQL and real processes)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sendonce-integration-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		os.Exit(1)
	}
	suite.dir = dir

	code := m.Run()

	killAll()
	pgtest.Close()
	if leaks := scanAllForSecrets(); len(leaks) > 0 {
		// A scenario that ran after the secrets scenario (or a -run that
		// skipped it) still gets its output checked.
		fmt.Println("integration: FAIL: the API key appears in what the processes printed or stored:")
		for _, l := range leaks {
			fmt.Println("    " + l)
		}
		code = 1
	}
	printSummaries(code)
	os.RemoveAll(dir)
	os.Exit(code)
}

// setup builds the command and settles the run's seed and size, once, from
// inside the first test that needs them: file reads made within m.Run are
// what go test's result cache watches, so a change to any source file of
// the module (cmd/sendonce included, which the test binary does not link)
// reruns the suite instead of replaying a stale pass.
func setup(t testing.TB) {
	t.Helper()
	suite.once.Do(func() {
		suite.seed = *flagSeed
		if v := os.Getenv("SENDONCE_SEED"); v != "" && suite.seed == 0 {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				suite.buildErr = fmt.Errorf("SENDONCE_SEED=%q is not a number", v)
				return
			}
			suite.seed = n
		}
		if suite.seed == 0 {
			suite.seed = rand.Uint64()%1_000_000_000 + 1
		}
		suite.scale = 1
		soak := os.Getenv("SENDONCE_SOAK")
		if *flagSoak || (soak != "" && soak != "0") {
			suite.scale = 10
			if n, err := strconv.Atoi(soak); err == nil && n > 1 {
				suite.scale = n
			}
		}
		suite.slack = *flagSlack
		if v := os.Getenv("SENDONCE_SLACK"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				suite.buildErr = fmt.Errorf("SENDONCE_SLACK=%q: %v", v, err)
				return
			}
			suite.slack = d
		}
		fmt.Fprintf(os.Stderr, "integration: seed=%d scale=%d slack=%s (repeat with -seed %d or SENDONCE_SEED=%d)\n",
			suite.seed, suite.scale, suite.slack, suite.seed, suite.seed)

		root, err := moduleRoot()
		if err != nil {
			suite.buildErr = err
			return
		}
		suite.root = root
		watchSources(root)
		suite.bin, suite.buildErr = build(root, suite.dir)
	})
	if suite.buildErr != nil {
		t.Fatalf("integration: %v", suite.buildErr)
	}
	t.Logf("seed=%d scale=%d", suite.seed, suite.scale)
}

// moduleRoot finds the directory holding go.mod, upwards from here.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// watchSources reads every source file of the checkout, the command's
// module (cmd/) and go.work included, except this suite's own (the test
// binary already depends on those).
func watchSources(root string) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "integration" || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".sql") || name == "go.mod" || name == "go.sum" || name == "go.work" || name == "go.work.sum" {
			if f, err := os.Open(p); err == nil {
				f.Close()
			}
		}
		return nil
	})
}

// build compiles cmd/sendonce without the race detector: the race detector
// is for the test binary; the command under test runs as it ships.
func build(root, dir string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(dir, "sendonce")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", out, "./cmd/sendonce")
	cmd.Dir = root
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sendonce: %v\n%s", err, buf.String())
	}
	fmt.Fprintf(os.Stderr, "integration: built sendonce in %s\n", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// rngFor gives a scenario its own random stream, derived from the run's
// seed and the scenario's name, so scenarios do not shift each other's
// draws and one can be repeated alone with -run.
func rngFor(name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(suite.seed, h.Sum64()))
}

// seedFor is rngFor's first draw, for the fake API's own generator.
func seedFor(name string) int64 {
	return int64(rngFor(name+"/fake").Uint64()>>1) + 1
}

var summaries struct {
	mu    sync.Mutex
	lines []string
}

// summary records a scenario's one-line result. go test shows a passing
// package's output only with -v, so the lines are printed at the end of the
// run by printSummaries, where they show in plain `go test ./...` too.
func summary(t testing.TB, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	summaries.mu.Lock()
	summaries.lines = append(summaries.lines, line)
	summaries.mu.Unlock()
}

// printSummaries prints the scenarios' lines. With -v, or when the package
// failed, go test shows the binary's stdout, so that is where they go.
// Otherwise go test swallows a passing package's output; the lines are then
// written to the stderr of the go command that runs this binary (its parent
// on Linux), which is the terminal or CI log running `go test ./...`.
func printSummaries(code int) {
	summaries.mu.Lock()
	lines := append([]string(nil), summaries.lines...)
	summaries.mu.Unlock()
	if len(lines) == 0 {
		return
	}
	text := ""
	for _, l := range lines {
		text += "integration: " + l + "\n"
	}
	if testing.Verbose() || code != 0 {
		fmt.Print(text)
		return
	}
	ppid := os.Getppid()
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if strings.TrimSpace(string(comm)) == "go" {
		if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", ppid), os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, err = f.WriteString(text)
			f.Close()
			if err == nil {
				return
			}
		}
	}
	fmt.Print(text)
}
