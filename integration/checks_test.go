package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// intent is one send the scenario asks for, with the recipients the fake's
// ledger must show it delivered to exactly once. Every recipient (for a
// broadcast: its audience id) belongs to one intent only.
type intent struct {
	Key        string
	Kind       outbox.Kind
	TemplateID string
	Payload    json.RawMessage
	Recipients []string
}

// makeIntents builds n intents with keys and recipients under prefix: mostly
// emails, with batches, template sends and broadcasts mixed in by rng.
func makeIntents(rng *rand.Rand, prefix string, n int) []intent {
	out := make([]intent, 0, n)
	for i := range n {
		key := fmt.Sprintf("%s:%04d", prefix, i)
		addr := func(s string) string { return fmt.Sprintf("%s-%04d%s@example.test", prefix, i, s) }
		var in intent
		switch r := rng.IntN(20); {
		case r < 14:
			in = emailIntent(key, addr(""))
		case r < 16:
			a, b := addr("a"), addr("b")
			in = intent{Key: key, Kind: outbox.KindBatch, Recipients: []string{a, b},
				Payload: mustJSON(map[string]any{"emails": []any{emailBody(a), emailBody(b)}})}
		case r < 18:
			a := addr("")
			in = intent{Key: key, Kind: outbox.KindTemplate, TemplateID: "welcome-v2", Recipients: []string{a},
				Payload: mustJSON(map[string]any{"from": "Shop <shop@example.test>", "to": []string{a},
					"values": map[string]any{"name": fmt.Sprintf("user %d", i)}})}
		default:
			aud := fmt.Sprintf("aud_%s_%04d", strings.ReplaceAll(prefix, "-", "_"), i)
			in = intent{Key: key, Kind: outbox.KindBroadcast, Recipients: []string{aud},
				Payload: mustJSON(map[string]any{"from": "news@example.test", "subject": "News " + key,
					"html": "<p>news</p>", "audienceId": aud})}
		}
		out = append(out, in)
	}
	return out
}

func emailIntent(key, to string) intent {
	return intent{Key: key, Kind: outbox.KindEmail, Recipients: []string{to}, Payload: mustJSON(emailBody(to))}
}

func emailBody(to string) map[string]any {
	return map[string]any{
		"from":    "Billing <billing@example.test>",
		"to":      []string{to},
		"subject": "Your invoice for " + to,
		"text":    "Thank you for your order.",
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (in intent) outboxIntent() outbox.Intent {
	return outbox.Intent{Key: in.Key, Kind: in.Kind, TemplateID: in.TemplateID, Payload: in.Payload}
}

// enqueueGo enqueues through the Go API, as an application does, in
// transactions of up to 100 intents.
func enqueueGo(t testing.TB, pool *pgxpool.Pool, intents []intent) {
	t.Helper()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for start := 0; start < len(intents); start += 100 {
		batch := intents[start:min(start+100, len(intents))]
		ins := make([]outbox.Intent, len(batch))
		for i, in := range batch {
			ins[i] = in.outboxIntent()
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueMany(ctx, tx, ins)
			return err
		})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
}

// enqueueSQL inserts intents with plain SQL, as a producer in another
// language does: no River job; the workers' sweeper must find them.
func enqueueSQL(t testing.TB, pool *pgxpool.Pool, intents []intent) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, in := range intents {
			var tmpl *string
			if in.TemplateID != "" {
				tmpl = &in.TemplateID
			}
			if _, err := tx.Exec(ctx,
				`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id) VALUES ($1, $2, $3, $4)`,
				in.Key, string(in.Kind), string(in.Payload), tmpl); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
}

// enqueueCLI enqueues each intent with `sendonce enqueue`, the body on stdin.
func enqueueCLI(t testing.TB, e env, intents []intent) {
	t.Helper()
	for _, in := range intents {
		args := []string{"enqueue", "--key", in.Key, "--kind", string(in.Kind)}
		if in.TemplateID != "" {
			args = append(args, "--template", in.TemplateID)
		}
		mustRun(t, "enqueue", e, strings.NewReader(string(in.Payload)), args...)
	}
}

// waitFor polls cond every 100 ms until it holds or timeout passes; then
// it fails the test with cond's last description of the state.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// counts is rows per state.
type counts map[string]int

func (c counts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func (c counts) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func countBy(ctx context.Context, pool *pgxpool.Pool, sql string) (counts, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := counts{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

func outboxStates(ctx context.Context, pool *pgxpool.Pool) (counts, error) {
	return countBy(ctx, pool, `SELECT state, count(*) FROM sendonce_outbox GROUP BY state`)
}

func jobStates(ctx context.Context, pool *pgxpool.Pool) (counts, error) {
	return countBy(ctx, pool, `SELECT state::text, count(*) FROM river_job GROUP BY state`)
}

// waitAllSent waits until every one of n intents is sent and every River
// job has ended: nothing pending, nothing left running or retryable. (A
// cancelled job is one whose intent was parked as failed and later retried
// with a new job.) An intent parked as failed ends the wait at once. Either
// failure is reported with t.Errorf and false returned, so the scenario
// goes on to check the ledger and say what went wrong there.
func waitAllSent(t testing.TB, pool *pgxpool.Pool, n int, timeout time.Duration, extra func() string) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		o, err := outboxStates(ctx, pool)
		var j counts
		if err == nil {
			j, err = jobStates(ctx, pool)
		}
		var failed []string
		if err == nil && o["failed"] > 0 {
			failed, err = queryStrings(ctx, pool, `SELECT idempotency_key || ': ' || coalesce(last_error, '') FROM sendonce_outbox WHERE state = 'failed' ORDER BY id LIMIT 5`)
		}
		cancel()
		state := fmt.Sprintf("outbox %s, river_job %s", o, j)
		if err != nil {
			state = err.Error()
		}
		if extra != nil {
			state += ", " + extra()
		}
		switch {
		case err == nil && o["sent"] == n && o.total() == n && j.total()-j["completed"]-j["cancelled"]-j["discarded"] == 0:
			return true
		case len(failed) > 0:
			t.Errorf("waiting for all %d intents to be sent: %d parked as failed (%s), e.g. %s", n, o["failed"], state, strings.Join(failed, "; "))
			return false
		case time.Now().After(deadline):
			t.Errorf("timed out after %s waiting for all %d intents sent and their jobs ended; last state: %s", timeout, n, state)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ledger is what the fake's delivery ledger says about a set of intents.
type ledger struct {
	Deliveries int // ledger entries for the intents' recipients
	Duplicates int // extra deliveries to a recipient beyond the first
	Lost       int // recipients never delivered to
	Unknown    int // deliveries to nobody the scenario asked for
	WrongKey   int // deliveries made under a key that is not their intent's
	problems   []string
}

// problem kinds, most serious first: the order they are reported in.
const (
	probDuplicate = iota
	probLost
	probUnknown
	probWrongKey
)

// checkExactlyOnce is the end of every scenario that runs the worker on
// good intents: each recipient delivered exactly once under its intent's
// key (checkLedger, reported), and no send request under a key that is no
// intent's (checkKeys). It returns the ledger for the summary line.
func checkExactlyOnce(t testing.TB, srv *fakeapi.Server, intents []intent) ledger {
	t.Helper()
	l := checkLedger(srv, intents)
	l.report(t)
	checkKeys(t, srv, intents)
	return l
}

// checkLedger compares the fake's ledger with the intents: each recipient
// delivered exactly once, under its intent's key.
func checkLedger(srv *fakeapi.Server, intents []intent) ledger {
	owner := map[string]intent{}
	for _, in := range intents {
		for _, r := range in.Recipients {
			owner[strings.ToLower(r)] = in
		}
	}
	seen := map[string]int{}
	var l ledger
	probs := make([][]string, 4)
	for _, d := range srv.Deliveries() {
		addrs := append(append(append([]string{}, d.To...), d.Cc...), d.Bcc...)
		mine := false
		for _, a := range addrs {
			in, ok := owner[strings.ToLower(bareAddress(a))]
			if !ok {
				continue
			}
			mine = true
			seen[strings.ToLower(bareAddress(a))]++
			if d.IdempotencyKey != in.Key {
				l.WrongKey++
				probs[probWrongKey] = append(probs[probWrongKey], fmt.Sprintf("%s delivered under key %q, its intent's key is %q", a, d.IdempotencyKey, in.Key))
			}
		}
		if mine {
			l.Deliveries++
		} else {
			l.Unknown++
			probs[probUnknown] = append(probs[probUnknown], fmt.Sprintf("delivery %s to %v (key %q) belongs to no intent", d.MessageID, addrs, d.IdempotencyKey))
		}
	}
	for r := range owner {
		switch n := seen[r]; {
		case n == 0:
			l.Lost++
			probs[probLost] = append(probs[probLost], fmt.Sprintf("%s (intent %s) never delivered", r, owner[r].Key))
		case n > 1:
			l.Duplicates += n - 1
			probs[probDuplicate] = append(probs[probDuplicate], fmt.Sprintf("%s (intent %s) delivered %d times", r, owner[r].Key, n))
		}
	}
	for _, p := range probs {
		sort.Strings(p)
		l.problems = append(l.problems, p...)
	}
	return l
}

// report fails the test for every problem of the ledger.
func (l ledger) report(t testing.TB) {
	t.Helper()
	if len(l.problems) > 0 {
		t.Errorf("ledger: %d duplicate deliveries, %d recipients never delivered to, %d deliveries to no intent, %d under a wrong key",
			l.Duplicates, l.Lost, l.Unknown, l.WrongKey)
	}
	for i, p := range l.problems {
		if i == 20 {
			t.Errorf("… and %d more ledger problems", len(l.problems)-20)
			break
		}
		t.Errorf("ledger: %s", p)
	}
}

func bareAddress(a string) string {
	if i := strings.LastIndex(a, "<"); i >= 0 {
		if j := strings.LastIndex(a, ">"); j > i {
			return a[i+1 : j]
		}
	}
	return strings.TrimSpace(a)
}

// outboxRow is what the checks read back from sendonce_outbox.
type outboxRow struct {
	Key      string
	State    string
	Attempts int
	Replayed bool
}

func outboxRows(t testing.TB, pool *pgxpool.Pool) map[string]outboxRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT idempotency_key, state, attempts, replayed FROM sendonce_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]outboxRow{}
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.Key, &r.State, &r.Attempts, &r.Replayed); err != nil {
			t.Fatal(err)
		}
		out[r.Key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sendRequests returns the fake's log of send requests (POSTs), by key, in
// arrival order.
func sendRequests(srv *fakeapi.Server) map[string][]fakeapi.RequestRecord {
	out := map[string][]fakeapi.RequestRecord{}
	for _, r := range srv.Requests() {
		if r.Method != "POST" || strings.HasSuffix(r.Path, "/cancel") {
			continue
		}
		out[r.IdempotencyKey] = append(out[r.IdempotencyKey], r)
	}
	for _, rs := range out {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].ReceivedAt.Before(rs[j].ReceivedAt) })
	}
	return out
}

// checkKeys fails the test for any send request whose key belongs to no
// intent: a worker that made up a key per attempt, or sent without one.
func checkKeys(t testing.TB, srv *fakeapi.Server, intents []intent) int {
	t.Helper()
	known := map[string]bool{}
	for _, in := range intents {
		known[in.Key] = true
	}
	bad := 0
	for key, rs := range sendRequests(srv) {
		if !known[key] {
			bad += len(rs)
			if bad <= 10 {
				t.Errorf("send request(s) with key %q, which is no intent's key (%d requests)", key, len(rs))
			}
		}
	}
	return bad
}
