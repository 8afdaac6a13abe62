package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

var unsubMembers = flag.Int("unsub.n", 5000, "members of TestUnsubscribeDuringRun's broadcast run")

const unsubSecret = "integration-unsubscribe-secret-5fA9qK"

var unsubLink = regexp.MustCompile(`<(http://[^>]+/u/[^>]+)>`)

// TestUnsubscribeDuringRun drains a digest run of 5,000 members (topic
// digest) through two coalescing workers, while 100 of its readers
// unsubscribe with a real one-click POST to the link their email would
// carry, and worker1 is SIGKILLed once: no member whose first claim came
// after its address's unsubscribe was recorded is delivered, nothing is
// delivered twice, every delivery carries its own List-Unsubscribe, and
// the run's counts add up exactly (sent + suppressed = members, sent =
// deliveries).
func TestUnsubscribeDuringRun(t *testing.T) {
	setup(t)
	ctx := context.Background()
	n := *unsubMembers
	const run = "digest:2026-w49"
	srv := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{apiKey}, Seed: seedFor("unsubscribe"),
		Rate: []fakeapi.RateLimit{{Count: 20, Per: time.Second}}})
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "unsubscribe")
	e := processEnv(dbURL, srv)
	e.Extra = append(e.Extra, "OPENEMAIL_WEBHOOK_SECRET=whsec_integration_unsub", "SENDONCE_UNSUBSCRIBE_SECRET="+unsubSecret)

	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("reader%05d@example.test", i) }
	for lo := 0; lo < n; lo += 1000 {
		var ins []outbox.Intent
		for i := lo; i < min(lo+1000, n); i++ {
			ins = append(ins, emailIntent(fmt.Sprintf("%s:%d", run, i), addr(i)).outboxIntent())
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: run, Topic: "digest", Intents: ins})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := ob.PauseRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	// Both workers sign links to worker0's listener: the public URL.
	hook0 := freeLoopbackAddr(t)
	start := func(name, hook string) *proc {
		args := append(workerArgs(t, workerOptions{Concurrency: 100, Coalesce: 25, APIRate: "20/s"}),
			"--webhook-addr", hook, "--unsubscribe-url", "http://"+hook0)
		p := startProc(t, name, e, args...)
		waitFor(t, 30*time.Second, name+"'s listener", func() (bool, string) {
			if !p.running() {
				t.Fatalf("%s exited: %v\n%s", name, p.err, p.output())
			}
			return strings.Contains(p.stdout.String(), "webhooks=http://"+hook), tail(p.stdout.String(), 300)
		})
		return p
	}
	w0 := start("worker0", hook0)
	w1 := start("worker1", freeLoopbackAddr(t))

	// Each reader's link is read from a probe: a one-member intent of the
	// topic to the reader's address, delivered before the run goes, whose
	// List-Unsubscribe is the link the reader's digest carries too (the
	// token is an HMAC over address and topic).
	rng := rand.New(rand.NewPCG(uint64(seedFor("unsubscribe")), 28))
	readers := rng.Perm(n)[:min(100, n)]
	links := map[int]string{}
	var probes []intent
	for _, i := range readers {
		probes = append(probes, emailIntent(fmt.Sprintf("probe:%d", i), addr(i)))
	}
	probeIns := make([]outbox.Intent, len(probes))
	for i, p := range probes {
		probeIns[i] = p.outboxIntent()
		probeIns[i].Topic = "digest"
	}
	// The probes go in a run of their own, sent first; the digest run is
	// paused (from before the workers start) until their links are read.
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "probes", Intents: probeIns})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the probes delivered", func() (bool, string) {
		c, _ := runCounts(ctx, pool, "probes")
		return c["sent"] == len(probes), c.String()
	})
	for _, d := range srv.Deliveries() {
		if !strings.HasPrefix(d.IdempotencyKey, "probe:") && !strings.HasPrefix(d.IdempotencyKey, "sendonce-batch:") {
			continue
		}
		var body struct {
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(d.Payload, &body); err != nil {
			t.Fatal(err)
		}
		m := unsubLink.FindStringSubmatch(body.Headers["List-Unsubscribe"])
		if m == nil || body.Headers["List-Unsubscribe-Post"] != "List-Unsubscribe=One-Click" {
			t.Fatalf("probe to %v: headers %v", d.To, body.Headers)
		}
		var i int
		if _, err := fmt.Sscanf(d.To[0], "reader%05d@example.test", &i); err != nil {
			t.Fatal(err)
		}
		links[i] = m[1]
	}
	if len(links) != len(readers) {
		t.Fatalf("%d links from %d probes", len(links), len(readers))
	}
	probesDelivered := len(srv.Deliveries())

	if _, err := ob.ResumeRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	recorded := map[string]time.Time{} // address -> when its unsubscribe was known recorded
	client := &http.Client{Timeout: 10 * time.Second}
	killed := false
	for k, i := range readers {
		resp, err := client.Post(links[i], "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("unsubscribe %s: %d %s", addr(i), resp.StatusCode, b)
		}
		recorded[addr(i)] = time.Now()
		if k == len(readers)/2 && !killed {
			w1.kill() // SIGKILL, mid-run, with sends in flight
			killed = true
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) // spread the unsubscribes over the run
	}
	waitFor(t, 3*time.Minute, "the run drained", func() (bool, string) {
		c, _ := runCounts(ctx, pool, run)
		return c["pending"] == 0 && c["sending"] == 0, c.String()
	})
	w0.stop(t)

	final, err := runCounts(ctx, pool, run)
	if err != nil {
		t.Fatal(err)
	}
	// Counts add up: every member is sent or suppressed, and the
	// deliveries of the run are its sent members, each once.
	byKey := map[string]int{}
	byAddr := map[string]int{}
	badHeaders := 0
	for _, d := range srv.Deliveries()[probesDelivered:] {
		for _, to := range d.To {
			byAddr[to]++
		}
		byKey[d.MessageID]++
		var body struct {
			Headers map[string]string `json:"headers"`
		}
		_ = json.Unmarshal(d.Payload, &body)
		m := unsubLink.FindStringSubmatch(body.Headers["List-Unsubscribe"])
		var i int
		_, serr := fmt.Sscanf(d.To[0], "reader%05d@example.test", &i)
		if m == nil || body.Headers["List-Unsubscribe-Post"] != "List-Unsubscribe=One-Click" || serr != nil ||
			(links[i] != "" && links[i] != m[1]) {
			badHeaders++
		}
	}
	if badHeaders != 0 {
		t.Errorf("%d deliveries without their own List-Unsubscribe and List-Unsubscribe-Post", badHeaders)
	}
	dups := 0
	for _, c := range byAddr {
		if c > 1 {
			dups++
		}
	}
	if final["sent"]+final["suppressed"] != n || final["failed"] != 0 || final["canceled"] != 0 {
		t.Errorf("run counts %s: want sent + suppressed = %d", final, n)
	}
	if len(byAddr) != final["sent"] || dups != 0 {
		t.Errorf("%d addresses delivered, %d twice; want %d (the sent members), 0", len(byAddr), dups, final["sent"])
	}
	// No member whose first claim came after its unsubscribe was recorded
	// was delivered.
	late := 0
	rows, err := pool.Query(ctx, `SELECT payload->'to'->>0, first_attempt_at FROM sendonce_outbox
		WHERE run_key = $1 AND state = 'sent'`, run)
	if err != nil {
		t.Fatal(err)
	}
	sentBefore := 0
	for rows.Next() {
		var to string
		var first time.Time
		if err := rows.Scan(&to, &first); err != nil {
			t.Fatal(err)
		}
		if at, ok := recorded[to]; ok {
			if first.After(at) {
				late++
				t.Errorf("%s: first claimed at %s, after its unsubscribe was recorded at %s, and delivered", to, first.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
			} else {
				sentBefore++
			}
		}
	}
	rows.Close()
	var unsubs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_unsubscribe_event WHERE topic = 'digest' AND source = 'one-click'`).Scan(&unsubs); err != nil || unsubs != len(readers) {
		t.Errorf("%d unsubscribe events, %v; want %d", unsubs, err, len(readers))
	}
	if final["suppressed"]+sentBefore != len(readers) {
		t.Errorf("%d suppressed + %d sent before their unsubscribe, want the %d readers", final["suppressed"], sentBefore, len(readers))
	}
	summary(t, "unsubscribe: run of %d (topic digest), %d one-click unsubscribes during it, worker1 SIGKILLed once: %s; "+
		"%d readers suppressed, %d sent before their unsubscribe, %d delivered after it; %d duplicates",
		n, len(readers), final, final["suppressed"], sentBefore, late, dups)
}
