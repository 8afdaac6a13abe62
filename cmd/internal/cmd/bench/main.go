// Command bench measures sendonce's throughput, latency, memory and pacing
// under an API rate limit against a durable PostgreSQL and writes the
// results to BENCHMARKS.md:
//
//	go run ./cmd/internal/cmd/bench [-runs 3] [-quick] [-only drain,enqueue] [-cpuprofile FILE]
//
// It uses the server in BENCH_DATABASE_URL or DATABASE_URL when one is set
// (creating and dropping a database of its own there), and otherwise starts
// a throwaway cluster with fsync on. Every figure is the median of -runs
// runs, with the spread (min–max) beside it, except the rate-limited drain,
// which takes minutes and runs once. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sendonce/sendonce/cmd/internal/bench"
)

func main() {
	os.Exit(run())
}

// run is the bench command: its flags, then each scenario in the order the
// table prints them. It is long because it is that list, which reads best
// top to bottom.
func run() int {
	var (
		runs       = flag.Int("runs", 3, "runs of every scenario; each figure is the median")
		quick      = flag.Bool("quick", false, "one smaller run of everything (a smoke test: figures are rougher)")
		only       = flag.String("only", "", "comma-separated scenarios to run (commits, drain, latency, enqueue, e2e, memory, ratelimit, coalesce, trouble, idle, history, tenants); default all")
		out        = flag.String("out", "BENCHMARKS.md", "file to write the table to; empty writes none")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of this process (worker, fake API, enqueuers) to FILE")
		poolConns  = flag.Int("pool", bench.DefaultPoolConns, "connections in the pool of each worker and of the River baselines")
		sendonce   = flag.String("sendonce", "", "sendonce binary for the scenarios that run `sendonce work` (default: build ./cmd/sendonce)")
		verbose    = flag.Bool("v", true, "print progress to stderr")
		history    = flag.String("history-sizes", "", "comma-separated sizes of sent history for the history scenario (e.g. 10000,100000,1000000,3000000); default 10000,3000000 (-quick: 1000,10000)")
	)
	flag.Parse()
	if *quick && !isSet("runs") {
		*runs = 1
	}
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "bench: -runs must be at least 1")
		return 2
	}
	logf := func(format string, args ...any) {
		if *verbose {
			fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
		}
	}

	var sizes []int
	for _, f := range strings.FieldsFunc(*history, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -history-sizes: %q is not a size\n", f)
			return 2
		}
		sizes = append(sizes, n)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	all := []bench.Scenario{
		bench.NewCommits(*quick),
		bench.NewDrain(*quick),
		bench.NewLatencyBound(*quick),
		bench.NewEnqueue(*quick),
		bench.NewEndToEnd(*quick),
		bench.NewMemory(*quick, *sendonce),
		bench.NewRateLimited(*quick, *sendonce),
		bench.NewCoalesced(*quick, *sendonce),
		bench.NewTrouble(*sendonce),
		bench.NewIdle(),
		bench.NewHistory(*quick, sizes),
		bench.NewTenants(*quick, *sendonce),
		bench.NewHook(*quick),
	}
	scenarios := all
	if *only != "" {
		names := strings.Split(*only, ",")
		scenarios = nil
		for _, s := range all {
			if slices.Contains(names, s.Name()) {
				scenarios = append(scenarios, s)
			}
		}
		if len(scenarios) == 0 {
			fmt.Fprintf(os.Stderr, "bench: -only %q names no scenario\n", *only)
			return 2
		}
	}

	defer func() {
		for _, s := range all {
			if c, ok := s.(io.Closer); ok {
				c.Close()
			}
		}
	}()

	started := time.Now()
	env, err := bench.Open(ctx, bench.EnvOptions{ServerURL: bench.ServerURLFromEnv(), PoolConns: *poolConns, Logf: logf})
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	defer env.Close()

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	for r := range *runs {
		for _, s := range scenarios {
			if ctx.Err() != nil {
				break
			}
			logf("run %d/%d: %s", r+1, *runs, s.Name())
			if err := s.Run(ctx, env); err != nil {
				logf("%s: %v", s.Name(), err)
				bench.Fail(s, err)
			}
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 1
	}

	var rows []*bench.Row
	var notes []string
	for _, s := range scenarios {
		rows = append(rows, s.Rows()...)
		notes = append(notes, s.Notes()...)
	}
	machine := bench.DescribeMachine(env)
	report := bench.Report{
		Machine: machine,
		Date:    started,
		Runs:    *runs,
		Quick:   *quick,
		Rows:    rows,
		Notes:   notes,
		Elapsed: time.Since(started),
	}
	fmt.Print(report.Summary())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report.Markdown()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		logf("wrote %s", *out)
	}
	return 0
}

// isSet reports whether the named flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
