package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestDrainFloor: each floor drains every job, delivers each email once,
// and leaves per send the records it stands for: a sent outbox row, a
// result row, an attempt and a result row, or an outbox row claimed once
// and sent.
func TestDrainFloor(t *testing.T) {
	ctx := context.Background()
	env, err := Open(ctx, EnvOptions{ServerURL: pgtest.ServerURL(t), PoolConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	p := DrainParams{N: 300, Concurrency: 20, FetchCooldown: 10 * time.Millisecond, Timeout: time.Minute}
	for _, f := range Floors {
		res, err := DrainFloor(ctx, env, p, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if res.N != p.N {
			t.Errorf("%s: drained %d jobs, want %d", f, res.N, p.N)
		}
		var sent, claimed, results, attempts int
		if err := env.Admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'),
			(SELECT count(*) FROM sendonce_outbox WHERE attempts = 1),
			(SELECT count(*) FROM bench_floor_result), (SELECT count(*) FROM bench_floor_attempt)`).Scan(&sent, &claimed, &results, &attempts); err != nil {
			t.Fatal(err)
		}
		want := map[Floor][4]int{FloorMark: {p.N, 0, 0, 0}, FloorResult: {0, 0, p.N, 0}, FloorAttempt: {0, 0, p.N, p.N}, FloorClaim: {p.N, p.N, 0, 0}}[f]
		if got := [4]int{sent, claimed, results, attempts}; got != want {
			t.Errorf("%s: outbox rows sent, claimed once; result rows; attempt rows = %v, want %v", f, got, want)
		}
	}
}
