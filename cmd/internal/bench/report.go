package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the figures were measured.
type Machine struct {
	CPU      string // model name from /proc/cpuinfo
	Cores    int
	MemoryGB float64 // MemTotal, in GiB
	Go       string
	Postgres string
	Kernel   string
}

// DescribeMachine reads the CPU model and memory from /proc, the Go
// version from the runtime and PostgreSQL's from the benchmark's server.
func DescribeMachine(env *Env) Machine {
	m := Machine{CPU: "unknown", Cores: runtime.NumCPU(), Go: runtime.Version(), Postgres: env.ServerVersion}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.MemoryGB = kb / (1 << 20)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

// String is the machine on one line.
func (m Machine) String() string {
	s := fmt.Sprintf("%s, %d cores, %.0f GiB memory; %s; PostgreSQL %s", m.CPU, m.Cores, m.MemoryGB, m.Go, m.Postgres)
	if m.Kernel != "" {
		s += "; " + m.Kernel
	}
	return s
}

// Report is a whole benchmark: where, when, the table and how it was
// measured.
type Report struct {
	Machine Machine
	Date    time.Time
	Runs    int
	Quick   bool
	Rows    []*Row
	Notes   []string
	Elapsed time.Duration
}

// header is the lines above the table.
func (r *Report) header() string {
	mode := fmt.Sprintf("median of %d runs", r.Runs)
	if r.Runs == 1 {
		mode = "1 run"
	}
	if r.Quick {
		mode += ", -quick (smaller runs: rough figures)"
	}
	return fmt.Sprintf("Machine: %s.  \nDate: %s; %s; took %s.\n",
		r.Machine, r.Date.UTC().Format("2006-01-02 15:04 MST"), mode, r.Elapsed.Round(time.Second))
}

// goals summarises the goals: how many met, and which missed.
func (r *Report) goals() string {
	met, total := 0, 0
	var missed []string
	for _, row := range r.Rows {
		if !row.HasGoal() {
			continue
		}
		total++
		if row.Met() {
			met++
		} else {
			missed = append(missed, row.Scenario+" ("+row.Measure+")")
		}
	}
	s := fmt.Sprintf("Goals met: %d of %d.\n", met, total)
	for _, m := range missed {
		s += "Missed: " + m + "\n"
	}
	return s
}

// Summary is what the command prints: the machine, the table and the goals.
func (r *Report) Summary() string {
	return "\n" + r.header() + "\n" + Markdown(r.Rows) + "\n" + r.goals()
}

// Markdown is BENCHMARKS.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `make bench` (`go run ./cmd/internal/cmd/bench`); do not edit by hand, run it again.\n\n")
	b.WriteString(r.header() + "\n")
	b.WriteString(Markdown(r.Rows) + "\n")
	b.WriteString(r.goals() + "\n")
	if len(r.Notes) > 0 {
		b.WriteString("## How it was measured\n\n")
		b.WriteString("PostgreSQL runs with fsync and synchronous commit on (a throwaway cluster unless BENCH_DATABASE_URL or " +
			"DATABASE_URL names a server; a database of the benchmark's own is created on it and dropped afterwards). " +
			"The fake OpenEmail API runs in the benchmark's process, on loopback, so it shares the two cores with the worker " +
			"and PostgreSQL. Tables are emptied and a CHECKPOINT forced before every measurement. A figure is the median of the " +
			"runs, the spread their min–max, and a ratio is computed run by run (value and baseline measured back to back).\n\n")
		for _, n := range r.Notes {
			b.WriteString(n + "\n\n")
		}
	}
	return b.String()
}
