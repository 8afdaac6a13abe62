package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestCPUCountsEndedBackends: a backend that did its work and ended
// between two readings (a pool closed its connection) is counted in their
// difference. Summing the live backends alone lost its time, which made
// the prune row's database CPU per row negative.
func TestCPUCountsEndedBackends(t *testing.T) {
	ctx := context.Background()
	env, err := Open(ctx, EnvOptions{ServerURL: pgtest.ServerURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatalf("this test reads the server's processes in /proc: %v", err)
	}

	c0 := env.ReadCPU()
	pool, err := env.NewPool(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM generate_series(1, 3000000)) s`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	st, ok := readStat("/proc/" + strconv.Itoa(pid) + "/stat")
	if !ok {
		t.Fatalf("cannot read the backend's /proc/%d/stat", pid)
	}
	spent := time.Duration(st.utime+st.stime) * time.Second / clockTicks
	if spent < 50*time.Millisecond {
		t.Fatalf("the backend spent %s, want a count of 3M rows to take more than 50 ms", spent)
	}
	pool.Close()
	// The backend ends once its connection is closed; its time reaches
	// the postmaster's count when the postmaster reaps it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still there 10 s after its pool closed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := env.ReadCPU().Sub(c0)
	if d.DB < spent {
		t.Errorf("database CPU between the readings %s, want at least the %s of the backend that ended", d.DB, spent)
	}
	t.Logf("the ended backend spent %s; the difference of the readings counts %s", spent, d.DB)
}

// TestServes: the processes counted as the benchmark database's, from
// their titles as PostgreSQL 15 sets them (NUL-separated in cmdline).
func TestServes(t *testing.T) {
	const db = "sendonce_bench_1"
	for _, c := range []struct {
		title  string
		ok     bool
		leader int
	}{
		{"postgres: bench sendonce_bench_1 127.0.0.1(51234) idle\x00", true, 0},
		{"postgres: bench sendonce_bench_1 [local] UPDATE", true, 0},
		{"postgres: bench other_db 127.0.0.1(51234) idle", false, 0},
		{"postgres: parallel worker for PID 4242", true, 4242},
		{"postgres: autovacuum worker sendonce_bench_1", true, 0},
		{"postgres: autovacuum worker other_db", false, 0},
		{"postgres: autovacuum launcher", false, 0},
		{"postgres: checkpointer ", false, 0},
		{"postgres: walwriter ", false, 0},
	} {
		ok, leader := serves(c.title, db)
		if ok != c.ok || leader != c.leader {
			t.Errorf("serves(%q) = %v, %d; want %v, %d", c.title, ok, leader, c.ok, c.leader)
		}
	}
}
