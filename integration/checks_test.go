package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
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
			// Exec mode: the producer's own statement names no prepared
			// statement, so it works through a transaction pooler too.
			if _, err := tx.Exec(ctx,
				`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id) VALUES ($1, $2, $3, $4)`,
				pgx.QueryExecModeExec, in.Key, string(in.Kind), string(in.Payload), tmpl); err != nil {
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

func (c counts) String() string { return "{" + joinCounts(c, "=", " ") + "}" }

// joinCounts writes c in key order, each key and its count joined by sep,
// the pairs by between.
func joinCounts(c map[string]int, sep, between string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s%s%d", k, sep, c[k]))
	}
	return strings.Join(parts, between)
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
	WrongKey   int // deliveries made under a key that is not the one their intent's row names
	BadBatches int // batch keys whose deliveries are not exactly their members' recipients
	problems   []string

	// Batches is what the outbox said about coalesced batches, read for
	// the check (nil when the check was given none).
	Batches *batches
}

// problem kinds, most serious first: the order they are reported in.
const (
	probDuplicate = iota
	probLost
	probUnknown
	probWrongKey
	probBatch
	probKinds
)

// batches is what the outbox says about coalesced batches: the batch key
// each intent's row names (sendonce_outbox.batch_key), and every batch ever
// frozen (sendonce_batch).
type batches struct {
	Of      map[string]string   // intent key → the batch key its row names
	Members map[string][]string // batch key → the keys of the rows naming it, sorted
	Frozen  map[string]string   // every batch key of sendonce_batch → its state
}

// loadBatches reads the batch keys the outbox names, and checks that the
// two tables agree: a batch not split holds exactly the rows that name it
// (sendonce_batch.member_keys), a split batch is named by no row, and every
// key a row names is a frozen batch's.
func loadBatches(t testing.TB, pool *pgxpool.Pool) *batches {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &batches{Of: map[string]string{}, Members: map[string][]string{}, Frozen: map[string]string{}}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, batch_key FROM sendonce_outbox WHERE batch_key IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, batch string
		if err := rows.Scan(&key, &batch); err != nil {
			t.Fatal(err)
		}
		b.Of[key] = batch
		b.Members[batch] = append(b.Members[batch], key)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	frozenMembers := map[string][]string{}
	rows, err = pool.Query(ctx, `SELECT idempotency_key, state, member_keys FROM sendonce_batch`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, state string
		var members []string
		if err := rows.Scan(&key, &state, &members); err != nil {
			t.Fatal(err)
		}
		b.Frozen[key] = state
		frozenMembers[key] = members
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for key, members := range b.Members {
		sort.Strings(members)
		state, ok := b.Frozen[key]
		switch {
		case !ok:
			t.Errorf("outbox rows %v name batch %q, which sendonce_batch does not hold", members, key)
		case state == "split":
			t.Errorf("outbox rows %v name batch %q, which was split", members, key)
		default:
			want := append([]string(nil), frozenMembers[key]...)
			sort.Strings(want)
			if !slices.Equal(members, want) {
				t.Errorf("batch %q (%s): sendonce_batch lists members %v, but the outbox rows naming it are %v", key, state, want, members)
			}
		}
	}
	for key, state := range b.Frozen {
		if _, named := b.Members[key]; !named && state != "split" {
			t.Errorf("batch %q (%s, members %v) is named by no outbox row", key, state, frozenMembers[key])
		}
	}
	return b
}

// keyOf is the key the intent's deliveries must carry: the batch key its
// row names, or, bound to no batch, its own.
func (b *batches) keyOf(intentKey string) string {
	if b != nil {
		if k := b.Of[intentKey]; k != "" {
			return k
		}
	}
	return intentKey
}

// checkExactlyOnce is the end of every scenario that runs the worker on
// good intents: each recipient delivered exactly once under the key its
// intent's row names (its own, or its batch's) (checkLedger, reported), and
// no send request under a key that is no intent's or batch's (checkKeys).
// It returns the ledger for the summary line.
func checkExactlyOnce(t testing.TB, srv *fakeapi.Server, pool *pgxpool.Pool, intents []intent) ledger {
	t.Helper()
	b := loadBatches(t, pool)
	l := checkLedger(srv, intents, b)
	l.report(t)
	checkKeys(t, srv, intents, b)
	return l
}

// checkLedger compares the fake's ledger with the intents: each recipient
// delivered exactly once, under the key its intent's row names: the batch
// key in sendonce_outbox.batch_key when it has one (b), else its own. Every
// batch key's deliveries must be exactly its members' recipients.
func checkLedger(srv *fakeapi.Server, intents []intent, b *batches) ledger {
	owner := map[string]intent{}
	for _, in := range intents {
		for _, r := range in.Recipients {
			owner[strings.ToLower(r)] = in
		}
	}
	seen := map[string]int{}
	l := ledger{Batches: b}
	probs := make([][]string, probKinds)
	// Per batch key: the recipients its deliveries went to, and those of
	// its members.
	gotBatch := map[string]map[string]int{}
	wantBatch := map[string]map[string]bool{}
	if b != nil {
		byKey := map[string]intent{}
		for _, in := range intents {
			byKey[in.Key] = in
		}
		for key, members := range b.Members {
			wantBatch[key] = map[string]bool{}
			for _, m := range members {
				for _, r := range byKey[m].Recipients {
					wantBatch[key][strings.ToLower(r)] = true
				}
			}
		}
	}
	for _, d := range srv.Deliveries() {
		addrs := append(append(append([]string{}, d.To...), d.Cc...), d.Bcc...)
		mine := false
		isBatch := strings.HasPrefix(d.IdempotencyKey, sendstate.BatchKeyPrefix)
		for _, a := range addrs {
			r := strings.ToLower(bareAddress(a))
			if isBatch {
				if gotBatch[d.IdempotencyKey] == nil {
					gotBatch[d.IdempotencyKey] = map[string]int{}
				}
				gotBatch[d.IdempotencyKey][r]++
			}
			in, ok := owner[r]
			if !ok {
				continue
			}
			mine = true
			seen[r]++
			if want := b.keyOf(in.Key); d.IdempotencyKey != want {
				l.WrongKey++
				if want == in.Key {
					probs[probWrongKey] = append(probs[probWrongKey], fmt.Sprintf("%s delivered under key %q, its intent's key is %q (its row names no batch)", a, d.IdempotencyKey, in.Key))
				} else {
					probs[probWrongKey] = append(probs[probWrongKey], fmt.Sprintf("%s delivered under key %q, but its intent %s's row names batch %q", a, d.IdempotencyKey, in.Key, want))
				}
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
	// A batch key's deliveries are exactly its members' recipients, each
	// once: none missing, none extra.
	batchKeys := map[string]bool{}
	for k := range gotBatch {
		batchKeys[k] = true
	}
	for k := range wantBatch {
		batchKeys[k] = true
	}
	for k := range batchKeys {
		var missing, extra []string
		for r := range wantBatch[k] {
			if gotBatch[k][r] == 0 {
				missing = append(missing, r)
			}
		}
		for r, n := range gotBatch[k] {
			switch {
			case !wantBatch[k][r]:
				extra = append(extra, r)
			case n > 1:
				extra = append(extra, fmt.Sprintf("%s (%d times)", r, n))
			}
		}
		if len(missing)+len(extra) > 0 {
			sort.Strings(missing)
			sort.Strings(extra)
			l.BadBatches++
			probs[probBatch] = append(probs[probBatch], fmt.Sprintf("batch %s (members %v): its deliveries are not exactly its members' recipients: missing %v, extra %v",
				k, b.memberList(k), missing, extra))
		}
	}
	for _, p := range probs {
		sort.Strings(p)
		l.problems = append(l.problems, p...)
	}
	return l
}

func (b *batches) memberList(key string) []string {
	if b == nil {
		return nil
	}
	return b.Members[key]
}

// report fails the test for every problem of the ledger.
func (l ledger) report(t testing.TB) {
	t.Helper()
	if len(l.problems) > 0 {
		t.Errorf("ledger: %d duplicate deliveries, %d recipients never delivered to, %d deliveries to no intent, %d under a wrong key, %d batches not delivered exactly to their members",
			l.Duplicates, l.Lost, l.Unknown, l.WrongKey, l.BadBatches)
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
	BatchKey string // the coalesced batch that carried it ("" for none)
}

func outboxRows(t testing.TB, pool *pgxpool.Pool) map[string]outboxRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT idempotency_key, state, attempts, replayed, coalesce(batch_key, '') FROM sendonce_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]outboxRow{}
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.Key, &r.State, &r.Attempts, &r.Replayed, &r.BatchKey); err != nil {
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
// intent and no frozen batch (b): a worker that made up a key per attempt,
// or sent without one. A batch key goes only to POST /emails/batch, and an
// intent bound to a batch was never sent under its own key (only an intent
// never attempted may join a batch).
func checkKeys(t testing.TB, srv *fakeapi.Server, intents []intent, b *batches) int {
	t.Helper()
	known := map[string]bool{}
	for _, in := range intents {
		known[in.Key] = true
	}
	bad := 0
	for key, rs := range sendRequests(srv) {
		_, frozen := b.frozen(key)
		switch {
		case frozen:
			for _, r := range rs {
				if !strings.HasSuffix(r.Path, "/emails/batch") {
					bad++
					t.Errorf("request %s %s under batch key %q: a batch goes to POST /emails/batch", r.Method, r.Path, key)
				}
			}
		case !known[key]:
			bad += len(rs)
			if bad <= 10 {
				t.Errorf("send request(s) with key %q, which is no intent's key nor a frozen batch's (%d requests)", key, len(rs))
			}
		case b.keyOf(key) != key:
			bad += len(rs)
			t.Errorf("intent %s was sent under its own key (%d requests), yet its row names batch %q", key, len(rs), b.keyOf(key))
		}
	}
	return bad
}

// frozen reports whether key is a frozen batch's, and its state.
func (b *batches) frozen(key string) (string, bool) {
	if b == nil {
		return "", false
	}
	state, ok := b.Frozen[key]
	return state, ok
}
