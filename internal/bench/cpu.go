package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU is processor time spent by this process and by the PostgreSQL
// backends serving the benchmark database. On a machine shared with other
// work, time per operation is steadier than operations per second, and it
// shows where a cost lies.
type CPU struct {
	Self time.Duration // this process: worker, River, client, fake API
	DB   time.Duration // PostgreSQL backends connected to the benchmark database
}

// Sub is c minus an earlier reading.
func (c CPU) Sub(earlier CPU) CPU {
	return CPU{Self: c.Self - earlier.Self, DB: c.DB - earlier.DB}
}

// ReadCPU reads the processor time used so far. DB is zero when the server
// is not on this machine (or not readable).
func (e *Env) ReadCPU() CPU {
	var c CPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if e.db != nil {
		c.DB = backendsCPU(e.db.Name)
	}
	return c
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux platform Go supports.
const clockTicks = 100

// backendsCPU sums the user and system time of the PostgreSQL backends
// whose process title names db ("postgres: USER DB HOST(PORT) STATE").
func backendsCPU(db string) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, statPath := range stats {
		dir := filepath.Dir(statPath)
		title, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.HasPrefix(string(title), "postgres: ") {
			continue
		}
		if f := strings.Fields(strings.ReplaceAll(string(title), "\x00", " ")); len(f) < 3 || f[2] != db {
			continue
		}
		b, err := os.ReadFile(statPath)
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses and may hold
		// spaces: state is field 3 of stat, utime 14 and stime 15.
		_, rest, ok := strings.Cut(string(b), ") ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += ut + st
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// medianCPU renders the medians of readings as "process X µs + database
// Y µs", or "not measured".
func medianCPU(cs []CPU) string {
	if len(cs) == 0 {
		return "not measured"
	}
	var self, db Samples
	for _, c := range cs {
		self.Add(float64(c.Self.Microseconds()))
		db.Add(float64(c.DB.Microseconds()))
	}
	s := Thousands(self.Median()) + " µs in this process"
	if db.Max() > 0 {
		s += " + " + Thousands(db.Median()) + " µs in the database"
	}
	return s
}
