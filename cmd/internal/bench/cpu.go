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
// backends serving the benchmark database, its autovacuum workers
// included. On a machine shared with other work, time per operation is
// steadier than operations per second, and it shows where a cost lies.
type CPU struct {
	Self time.Duration // this process: worker, River, client, fake API
	// DB is, in a reading, the time of the backends connected to the
	// benchmark database now (and of its autovacuum workers); in a
	// difference (Sub), the time the server spent for it in between,
	// backends that ended meanwhile included.
	DB time.Duration

	// backends are the nanoseconds on a CPU of each backend of the
	// database (and of its parallel workers) at the reading, by pid
	// (/proc/PID/schedstat); reaped are the server's ended processes'
	// nanoseconds, as the postmaster counts them (cutime and cstime, in
	// ticks of 10 ms: a child's times are added to its parent's when it is
	// reaped). Whole ticks made a second of an idle worker's database
	// time 0, 10 or 20 ms over a 20 s window.
	backends map[int]int64
	reaped   int64
}

// Sub is c minus an earlier reading. A backend that ended in between (a
// pool closed its connection, a parallel worker finished, a worker process
// stopped) took its time out of the sum of live backends; its whole time
// went into the postmaster's count of reaped children, so the difference
// adds that count's growth and takes off what the earlier reading had of
// the ended backends. (Summing the live backends alone made the prune
// row's database CPU per row negative, and left out parallel workers.)
// An autovacuum worker in the benchmark database is counted as a backend
// (see serves): its time in between, whether or not it ended. The growth
// also holds any other child reaped meanwhile (on the benchmark's own
// server, seldom one).
func (c CPU) Sub(earlier CPU) CPU {
	d := CPU{Self: c.Self - earlier.Self, DB: c.DB - earlier.DB}
	if c.backends == nil || earlier.backends == nil {
		return d
	}
	var ns int64
	for pid, t := range c.backends {
		ns += t - earlier.backends[pid]
	}
	for pid, t := range earlier.backends {
		if _, live := c.backends[pid]; !live {
			ns -= t
		}
	}
	ns += c.reaped - earlier.reaped
	d.DB = time.Duration(ns)
	return d
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
		c.backends, c.reaped = backendsCPU(e.db.Name)
		var ns int64
		for _, t := range c.backends {
			ns += t
		}
		c.DB = time.Duration(ns)
	}
	return c
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux platform Go supports.
const clockTicks = 100

// procStat is what backendsCPU reads of /proc/PID/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readStat reads /proc/PID/stat at path: the fields after the command,
// which is in parentheses and may hold spaces (state is field 3, ppid 4,
// utime 14, stime 15, cutime 16, cstime 17).
func readStat(path string) (procStat, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return procStat{}, false
	}
	f := strings.Fields(rest)
	if len(f) < 15 {
		return procStat{}, false
	}
	var s procStat
	s.ppid, _ = strconv.Atoi(f[1])
	s.utime, _ = strconv.ParseInt(f[11], 10, 64)
	s.stime, _ = strconv.ParseInt(f[12], 10, 64)
	s.cutime, _ = strconv.ParseInt(f[13], 10, 64)
	s.cstime, _ = strconv.ParseInt(f[14], 10, 64)
	return s, true
}

// backendsCPU reads the nanoseconds on a CPU of the PostgreSQL processes
// working for db (see serves), by pid (/proc/PID/schedstat, or the ticks
// of /proc/PID/stat where it is missing), and the nanoseconds of the
// server's reaped children (its postmaster, the backends' parent: cutime +
// cstime, whole ticks).
func backendsCPU(db string) (map[int]int64, int64) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	backends := map[int]int64{}
	leaders := map[int]bool{}
	parallel := map[int]int{} // parallel worker pid: its leader's pid
	var postmaster int
	for _, statPath := range stats {
		dir := filepath.Dir(statPath)
		title, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.HasPrefix(string(title), "postgres: ") {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		ok, leader := serves(string(title), db)
		if !ok {
			continue
		}
		st, ok := readStat(statPath)
		if !ok {
			continue
		}
		if leader != 0 {
			parallel[pid] = leader
		} else {
			leaders[pid] = true
			postmaster = st.ppid
		}
		backends[pid] = onCPU(dir, st)
	}
	for pid, leader := range parallel {
		if !leaders[leader] {
			delete(backends, pid)
		}
	}
	var reaped int64
	if postmaster > 0 {
		if st, ok := readStat(filepath.Join("/proc", strconv.Itoa(postmaster), "stat")); ok {
			reaped = (st.cutime + st.cstime) * int64(time.Second/clockTicks)
		}
	}
	return backends, reaped
}

// onCPU is the nanoseconds on a CPU of the process whose /proc folder is
// dir: the first field of its schedstat, or, where the kernel keeps none,
// its stat's user and system ticks.
func onCPU(dir string, st procStat) int64 {
	if b, err := os.ReadFile(filepath.Join(dir, "schedstat")); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return ns
			}
		}
	}
	return (st.utime + st.stime) * int64(time.Second/clockTicks)
}

// serves says whether the process of a title works for db, and for a
// parallel worker, its leader's pid: a backend connected to db ("postgres:
// USER DB HOST(PORT) STATE"), a parallel worker ("postgres: parallel worker
// for PID N", counted when its leader is), or an autovacuum worker in db
// ("postgres: autovacuum worker DB"). Counted only through the
// postmaster's reaped children, an autovacuum worker added all its time to
// a difference it ended in, and none to one it outlived.
func serves(title, db string) (ok bool, leader int) {
	f := strings.Fields(strings.ReplaceAll(title, "\x00", " "))
	switch {
	case len(f) >= 6 && f[1] == "parallel" && f[2] == "worker" && f[4] == "PID":
		leader, err := strconv.Atoi(f[5])
		return err == nil, leader
	case len(f) >= 4 && f[1] == "autovacuum" && f[2] == "worker":
		return f[3] == db, 0
	default:
		return len(f) >= 3 && f[2] == db, 0
	}
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
