package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestBadInput feeds bad intents to `sendonce enqueue` and to plain SQL
// inserts into sendonce_outbox while a worker runs, and checks that each is
// refused with a message naming the problem, and that neither the outbox,
// River's jobs nor the fake's ledger changed.
func TestBadInput(t *testing.T) {
	setup(t)
	start := time.Now()
	srv := newFake(t, "bad-input")
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "badinput")
	e := processEnv(dbURL, srv)
	ctx := context.Background()

	w := startWorker(t, "worker", e, workerOptions{Concurrency: 4})

	// A good intent first, sent, so the key-reuse cases have a key to
	// reuse and the worker is known to be working.
	good := func(to string) map[string]any {
		return map[string]any{"from": "Shop <shop@example.test>", "to": []string{to}, "subject": "Hello", "text": "Hi."}
	}
	baseline := emailIntent("bad-input:baseline", "baseline@example.test")
	enqueueCLI(t, e, []intent{baseline})
	waitFor(t, 30*time.Second, "the baseline intent to be sent", func() (bool, string) {
		o, err := outboxStates(ctx, pool)
		return err == nil && o["sent"] == 1, fmt.Sprint(o, err)
	})
	// The same key with the same body again is not an error: exit 0,
	// nothing written.
	again := mustRun(t, "enqueue-again", e, strings.NewReader(string(baseline.Payload)), "enqueue", "--key", baseline.Key)
	if !strings.Contains(again.stdout, "already") {
		t.Errorf("enqueue of an existing intent: stdout %q, want it to say the intent is already there", again.stdout)
	}

	// The audit's setting for the address forms below (issue 22): the
	// address they all name is suppressed.
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_suppression (address, reason) VALUES ('ada@example.test', 'manual')`); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, pool, srv)

	js := func(v any) string { return string(mustJSON(v)) }
	with := func(changes map[string]any) string {
		m := good("x@example.test")
		for k, v := range changes {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return js(m)
	}
	batch := func(emails ...any) string { return js(map[string]any{"emails": emails}) }
	many := make([]any, 101)
	for i := range many {
		many[i] = good(fmt.Sprintf("m%d@example.test", i))
	}
	huge := with(map[string]any{"text": strings.Repeat("x", 1<<20+10)})
	missingFile := filepath.Join(t.TempDir(), "no-such-body.json")
	hugeFile := filepath.Join(t.TempDir(), "huge.json")
	if err := os.WriteFile(hugeFile, []byte(huge), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := with(nil)
	longKey := strings.Repeat("k", 256)

	type cliCase struct {
		name string
		args []string // after "enqueue"
		body string
		want []string // each must appear in the one stderr line (case-insensitive; "a|b": either)
	}
	cli := []cliCase{
		{"malformed JSON", []string{"--key", "bad:1"}, `{"from": "a@example.test", "to": [`, []string{"json"}},
		{"trailing garbage after JSON", []string{"--key", "bad:2"}, ok + ` trailing`, []string{"json"}},
		{"empty body", []string{"--key", "bad:3"}, ``, []string{"empty"}},
		{"JSON array instead of object", []string{"--key", "bad:4"}, `[` + ok + `]`, []string{"payload", "object|array"}},
		{"JSON string instead of object", []string{"--key", "bad:5"}, `"send it"`, []string{"payload", "object|string"}},
		{"JSON null", []string{"--key", "bad:6"}, `null`, []string{"object"}},
		{"key with a space", []string{"--key", "invoice 42"}, ok, []string{"key", "invoice 42"}},
		{"key too long", []string{"--key", longKey}, ok, []string{"key", "255"}},
		{"empty key", []string{"--key", ""}, ok, []string{"--key"}},
		{"no key", []string{}, ok, []string{"--key"}},
		{"unicode key", []string{"--key", "rechnung:für-jürgen"}, ok, []string{"key"}},
		{"key with a slash", []string{"--key", "invoice/42"}, ok, []string{"key"}},
		{"unknown kind", []string{"--key", "bad:7", "--kind", "sms"}, ok, []string{"kind", "sms"}},
		{"missing recipients", []string{"--key", "bad:8"}, with(map[string]any{"to": nil}), []string{"to", "recipient"}},
		{"empty recipients", []string{"--key", "bad:9"}, with(map[string]any{"to": []string{}}), []string{"to", "recipient"}},
		{"recipient of the wrong type", []string{"--key", "bad:10"}, with(map[string]any{"to": 42}), []string{"to"}},
		{"empty recipient address", []string{"--key", "bad:11"}, with(map[string]any{"to": []string{""}}), []string{"to", "empty"}},
		{"cc of the wrong type", []string{"--key", "bad:12"}, with(map[string]any{"cc": map[string]any{"a": 1}}), []string{"cc"}},
		{"missing from", []string{"--key", "bad:13"}, with(map[string]any{"from": nil}), []string{"from"}},
		{"from of the wrong type", []string{"--key", "bad:14"}, with(map[string]any{"from": 7}), []string{"from"}},
		{"missing content", []string{"--key", "bad:15"}, with(map[string]any{"text": nil}), []string{"content"}},
		{"oversized payload on stdin", []string{"--key", "bad:16"}, huge, []string{"1 MiB"}},
		{"oversized payload in a file", []string{"--key", "bad:17", "--file", hugeFile}, "", []string{"1 MiB", hugeFile}},
		{"key reuse with a different body", []string{"--key", baseline.Key}, js(good("someone-else@example.test")), []string{baseline.Key, "different"}},
		{"key reuse with a different kind", []string{"--key", baseline.Key, "--kind", "template", "--template", "t1"}, string(baseline.Payload), []string{baseline.Key, "different"}},
		{"unparseable send time", []string{"--key", "bad:18", "--send-at", "tomorrow 9am"}, ok, []string{"--send-at", "tomorrow 9am"}},
		{"send time without a zone", []string{"--key", "bad:19", "--send-at", "2030-01-02 08:00"}, ok, []string{"--send-at", "RFC 3339"}},
		{"scheduledAt in the body not a time", []string{"--key", "bad:20"}, with(map[string]any{"scheduledAt": "next week"}), []string{"scheduledAt"}},
		{"template without id", []string{"--key", "bad:21", "--kind", "template"}, ok, []string{"--template"}},
		{"template id for an email", []string{"--key", "bad:22", "--template", "welcome"}, ok, []string{"template"}},
		{"batch with a bad item", []string{"--key", "bad:23", "--kind", "batch"}, batch(good("b0@example.test"), map[string]any{"from": "a@example.test", "text": "x"}), []string{"emails[1]", "to"}},
		{"batch item not an object", []string{"--key", "bad:24", "--kind", "batch"}, batch(42), []string{"emails"}},
		{"empty batch", []string{"--key", "bad:25", "--kind", "batch"}, batch(), []string{"emails"}},
		{"batch over 100 emails", []string{"--key", "bad:26", "--kind", "batch"}, batch(many...), []string{"101", "100"}},
		{"batch without emails", []string{"--key", "bad:27", "--kind", "batch"}, ok, []string{"emails"}},
		{"broadcast without audience", []string{"--key", "bad:28", "--kind", "broadcast"}, ok, []string{"audience"}},
		{"missing body file", []string{"--key", "bad:29", "--file", missingFile}, "", []string{missingFile}},
		{"stray argument", []string{"--key", "bad:30", "extra"}, ok, []string{"argument"}},
		// Address forms the API would take but the suppression list could
		// not match (issue 22): refused, naming the field and the value.
		{"recipient with a comment", []string{"--key", "bad:31"}, with(map[string]any{"to": []string{"ada@example.test (Ada)"}}), []string{"payload.to[0]", `"ada@example.test (Ada)"`, "comment", `use "Ada <ada@example.test>"`}},
		{"recipient with a quoted local part", []string{"--key", "bad:32"}, with(map[string]any{"to": []string{`"ada"@example.test`}}), []string{"payload.to[0]", `ada\"@example.test`, "quoted local part", `use "ada@example.test"`}},
		{"recipient after a tab", []string{"--key", "bad:33"}, with(map[string]any{"to": []string{"\tada@example.test"}}), []string{"payload.to[0]", `"\tada@example.test"`, "tab"}},
		{"recipient with a name and a comment", []string{"--key", "bad:34"}, with(map[string]any{"to": []string{"Ada <ada@example.test> (work)"}}), []string{"payload.to[0]", "(work)", "comment"}},
		{"group in cc", []string{"--key", "bad:35"}, with(map[string]any{"cc": []string{"Friends: ada@example.test;"}}), []string{"payload.cc[0]", "Friends:", "group"}},
		{"batch bcc with a comment", []string{"--key", "bad:36", "--kind", "batch"}, batch(good("b0@example.test"), map[string]any{"from": "a@example.test", "to": []string{"b1@example.test"}, "bcc": []string{"ada@example.test (Ada)"}, "text": "x"}), []string{"payload.emails[1].bcc[0]", "comment"}},
		{"template recipient with a unicode domain", []string{"--key", "bad:37", "--kind", "template", "--template", "t1"}, with(map[string]any{"to": []string{"ada@bücher.example"}}), []string{"payload.to[0]", "xn--"}},
	}
	for _, c := range cli {
		r := run(t, "enqueue-bad", e, strings.NewReader(c.body), append([]string{"enqueue"}, c.args...)...)
		line := strings.TrimRight(r.stderr, "\n")
		t.Logf("enqueue, %s: exit %d: %s", c.name, r.code, clipText(line, 200))
		switch {
		case r.code == 0:
			t.Errorf("enqueue, %s: exit 0, want a refusal\nstdout: %s", c.name, r.stdout)
			continue
		case strings.Contains(line, "\n") || line == "":
			t.Errorf("enqueue, %s: stderr is not one line:\n%s", c.name, r.stderr)
		case r.stdout != "":
			t.Errorf("enqueue, %s: refused, yet printed on stdout: %q", c.name, r.stdout)
		}
		for _, want := range c.want {
			if !containsAny(line, want) {
				t.Errorf("enqueue, %s: stderr %q does not name the problem (want %q in it)", c.name, clipText(line, 300), want)
			}
		}
	}

	type sqlCase struct {
		name     string
		key      any // the idempotency_key column
		kind     any
		payload  any // text cast to jsonb
		template any
		sendAt   any // text cast to timestamptz
		extra    string
		want     []string
	}
	sqlCases := []sqlCase{
		{name: "key with a space", key: "invoice 42", kind: "email", payload: ok, want: []string{"idempotency_key", "invoice 42"}},
		{name: "key too long", key: longKey, kind: "email", payload: ok, want: []string{"idempotency_key", "255"}},
		{name: "empty key", key: "", kind: "email", payload: ok, want: []string{"idempotency_key"}},
		{name: "null key", key: nil, kind: "email", payload: ok, want: []string{"idempotency_key"}},
		{name: "unicode key", key: "rechnung:für-jürgen", kind: "email", payload: ok, want: []string{"idempotency_key"}},
		{name: "unknown kind", key: "sql:1", kind: "sms", payload: ok, want: []string{"kind", "sms"}},
		{name: "malformed JSON", key: "sql:2", kind: "email", payload: `{"from": "a@example.test", "to": [`, want: []string{"json"}},
		{name: "JSON array payload", key: "sql:3", kind: "email", payload: `[` + ok + `]`, want: []string{"object"}},
		{name: "JSON string payload", key: "sql:4", kind: "email", payload: `"send it"`, want: []string{"object"}},
		{name: "null payload", key: "sql:5", kind: "email", payload: nil, want: []string{"payload"}},
		{name: "missing recipients", key: "sql:6", kind: "email", payload: with(map[string]any{"to": nil}), want: []string{"recipient", `"to"`}},
		{name: "empty recipients", key: "sql:7", kind: "email", payload: with(map[string]any{"to": []string{}}), want: []string{"recipient", `"to"`}},
		{name: "recipient of the wrong type", key: "sql:8", kind: "email", payload: with(map[string]any{"to": 42}), want: []string{`"to"`}},
		{name: "missing from", key: "sql:9", kind: "email", payload: with(map[string]any{"from": nil}), want: []string{`"from"`}},
		{name: "missing content", key: "sql:10", kind: "email", payload: with(map[string]any{"text": nil}), want: []string{"content"}},
		{name: "oversized payload", key: "sql:11", kind: "email", payload: huge, want: []string{"1 MiB"}},
		{name: "template without id", key: "sql:12", kind: "template", payload: ok, want: []string{"template_id"}},
		{name: "template id for an email", key: "sql:13", kind: "email", payload: ok, template: "welcome", want: []string{"template_id"}},
		{name: "batch with a bad item", key: "sql:14", kind: "batch", payload: batch(good("b0@example.test"), map[string]any{"to": []string{"b1@example.test"}, "text": "x"}), want: []string{"emails[1]", "from"}},
		{name: "empty batch", key: "sql:15", kind: "batch", payload: batch(), want: []string{"emails"}},
		{name: "batch over 100 emails", key: "sql:16", kind: "batch", payload: batch(many...), want: []string{"101", "100"}},
		{name: "broadcast without audience", key: "sql:17", kind: "broadcast", payload: ok, want: []string{"audience"}},
		{name: "key reuse", key: baseline.Key, kind: "email", payload: js(good("someone-else@example.test")), want: []string{"idempotency_key"}},
		{name: "unparseable send time", key: "sql:18", kind: "email", payload: ok, sendAt: "tomorrow 9am", want: []string{"timestamp", "tomorrow 9am"}},
		{name: "unknown state", key: "sql:19", kind: "email", payload: ok, extra: "state = 'done'", want: []string{"state"}},
		{name: "negative attempts", key: "sql:20", kind: "email", payload: ok, extra: "attempts = -1", want: []string{"attempts"}},
		{name: "recipient with a comment", key: "sql:21", kind: "email", payload: with(map[string]any{"to": []string{"ada@example.test (Ada)"}}), want: []string{"to[0]", `"ada@example.test (Ada)"`, "comment"}},
		{name: "recipient with a quoted local part", key: "sql:22", kind: "email", payload: with(map[string]any{"to": []string{`"ada"@example.test`}}), want: []string{"to[0]", `ada\"@example.test`, "quoted"}},
		{name: "recipient after a tab", key: "sql:23", kind: "email", payload: with(map[string]any{"to": []string{"\tada@example.test"}}), want: []string{"to[0]", `"\tada@example.test"`, "tab"}},
		{name: "recipient with a name and a comment", key: "sql:24", kind: "email", payload: with(map[string]any{"to": "Ada <ada@example.test> (work)"}), want: []string{`"to"`, "(work)", "comment"}},
		{name: "batch bcc with a comment", key: "sql:25", kind: "batch", payload: batch(good("b0@example.test"), map[string]any{"from": "a@example.test", "to": []string{"b1@example.test"}, "bcc": []string{"ada@example.test (Ada)"}, "text": "x"}), want: []string{"emails[1].bcc[0]", "comment"}},
		{name: "template cc in a group", key: "sql:26", kind: "template", template: "t1", payload: with(map[string]any{"cc": []string{"Friends: ada@example.test;"}}), want: []string{"cc[0]", "group"}},
	}
	for _, c := range sqlCases {
		sql := `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id, send_at) VALUES ($1, $2, $3::text::jsonb, $4, $5::text::timestamptz)`
		if c.extra != "" {
			// A column the producer must leave alone, set anyway.
			col, val, _ := strings.Cut(c.extra, " = ")
			sql = fmt.Sprintf(`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id, send_at, %s) VALUES ($1, $2, $3::text::jsonb, $4, $5::text::timestamptz, %s)`, col, val)
		}
		_, err := pool.Exec(ctx, sql, c.key, c.kind, c.payload, c.template, c.sendAt)
		if err == nil {
			t.Errorf("SQL insert, %s: accepted, want a refusal", c.name)
			continue
		}
		t.Logf("SQL insert, %s: %s", c.name, clipText(err.Error(), 200))
		for _, want := range c.want {
			if !containsAny(err.Error(), want) {
				t.Errorf("SQL insert, %s: error %q does not name the problem (want %q in it)", c.name, clipText(err.Error(), 300), want)
			}
		}
	}

	// Gaps between the trigger and the Go API's validation, probed in a
	// transaction that is rolled back: reported, not fatal.
	gaps := probeTriggerGaps(t, pool, with(map[string]any{"scheduledAt": "next week"}))

	after := snapshot(t, pool, srv)
	if after != before {
		t.Errorf("bad input changed something: before %+v, after %+v", before, after)
	}

	// A good row last: once it is sent, the worker has had every chance
	// to send anything bad that slipped in.
	sentinel := emailIntent("bad-input:sentinel", "sentinel@example.test")
	enqueueSQL(t, pool, []intent{sentinel})
	waitAllSent(t, pool, 2, 30*time.Second, nil)
	w.stop(t)
	final := snapshot(t, pool, srv)
	want := before
	want.rows++ // inserted by SQL, the sentinel is drained: no River job
	want.deliveries++
	want.requests++
	if final != want {
		t.Errorf("after the sentinel: %+v, want %+v", final, want)
	}
	l := checkLedger(srv, []intent{baseline, sentinel}, loadBatches(t, pool))
	l.report(t)

	summary(t, "bad-input: seed=%d cli_cases=%d sql_cases=%d refused=%d rows=%d→%d jobs=%d→%d deliveries=%d→%d trigger_gaps=%d elapsed=%s",
		suite.seed, len(cli), len(sqlCases), len(cli)+len(sqlCases), before.rows, after.rows, before.jobs, after.jobs,
		before.deliveries, after.deliveries, gaps, time.Since(start).Round(time.Second))
}

// state is what bad input must not change: the outbox's rows, River's
// jobs, the fake's deliveries and the requests it received.
type state struct {
	rows, jobs, deliveries, requests int
}

func snapshot(t testing.TB, pool *pgxpool.Pool, srv *fakeapi.Server) state {
	t.Helper()
	var s state
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sendonce_outbox), (SELECT count(*) FROM river_job)`).Scan(&s.rows, &s.jobs); err != nil {
		t.Fatal(err)
	}
	s.deliveries = len(srv.Deliveries())
	s.requests = len(srv.Requests())
	return s
}

// probeTriggerGaps inserts, in a transaction it rolls back, rows that both
// the Go API and the trigger must refuse, and fails for each one either
// lets in.
func probeTriggerGaps(t testing.TB, pool *pgxpool.Pool, badScheduledAt string) int {
	t.Helper()
	ctx := context.Background()
	probes := []struct{ name, kind, payload string }{
		{"payload scheduledAt that is not a time", "email", badScheduledAt},
		{"broadcast without subject or content", "broadcast", `{"from":"news@example.test","audienceId":"aud_probe"}`},
	}
	gaps := 0
	for _, p := range probes {
		in := outbox.Intent{Key: "probe:1", Kind: outbox.Kind(p.kind), Payload: json.RawMessage(p.payload)}
		goErr := in.Validate()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, sqlErr := tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('probe:1', $1, $2::text::jsonb)`, p.kind, p.payload)
		tx.Rollback(ctx)
		if goErr == nil || sqlErr == nil {
			gaps++
			t.Errorf("validation gap, %s: the Go API says %v; the SQL trigger says %v; both must refuse it", p.name, goErr, sqlErr)
		}
	}
	return gaps
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// containsAny reports whether s contains, case-insensitively, one of the
// alternatives of want ("a|b").
func containsAny(s, want string) bool {
	for _, alt := range strings.Split(want, "|") {
		if strings.Contains(strings.ToLower(s), strings.ToLower(alt)) {
			return true
		}
	}
	return false
}
