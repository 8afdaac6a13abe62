package migrations_test

import (
	"context"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestHashesOutliveMigration00023: the tombstones' hashes, computed by the
// functions as migration 00023 declares them, are the ones stored before
// it (values from migration 00009's definitions): a pruned key answers
// from its tombstone as before, not as key reuse.
func TestHashesOutliveMigration00023(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	for _, c := range []struct {
		sql  string
		args []any
		want string
	}{
		{`SELECT sendonce_key_hash($1)`, []any{"invoice:inv_4192"}, "5277102a02c8f0b499784d2586ff2b70"},
		{`SELECT sendonce_intent_hash('email', NULL, $1)`,
			[]any{`{"to": ["a@example.com"], "from": "Shop <s@example.com>", "text": "é \" \\\\ ok"}`}, "c4831a9dc87f3b469709bbb5e41cdba2"},
		{`SELECT sendonce_intent_hash('template', $1, $2)`, []any{`tmpl "1"`, `{"b": 2.50, "a": null}`}, "710ca57cb360406ddb8488ac9465ce99"},
	} {
		var got []byte
		if err := pool.QueryRow(ctx, c.sql, c.args...).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got) != c.want {
			t.Errorf("%s %q = %x, want %s (the hash tombstones were stored under)", c.sql, c.args, got, c.want)
		}
	}
}

// TestFunctionsAreInlined: the functions a prune and a claim call per row
// are inlined into the statement (migration 00023), where the
// SQL-function executor started a plan for every call (a claim's lookup on
// the suppression list: 255 µs a row). A function declared IMMUTABLE over
// a STABLE body, or a set-returning one called in a select list, shows in
// the plan by its name. The suppression lookup probes the list's key for
// each recipient, whatever the list's size.
func TestFunctionsAreInlined(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	pgtest.Exec(t, pool, `CREATE TABLE probe (k text, kind text, payload jsonb, topic text)`)
	// A list of some length, so that scanning it would look no cheaper.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_suppression (address, reason)
		SELECT 'blocked' || g || '@example.org', 'bounced' FROM generate_series(1, 10000) g`)
	pgtest.Exec(t, pool, `ANALYZE sendonce_suppression`)
	for _, c := range []struct{ fn, sql, want string }{
		{"sendonce_key_hash", `SELECT sendonce_key_hash(k) FROM (SELECT * FROM probe LIMIT 1) AS probe`, "sha256("},
		{"sendonce_intent_hash", `SELECT sendonce_intent_hash(kind, NULL, payload) FROM (SELECT * FROM probe LIMIT 1) AS probe`, "sha256("},
		{"sendonce_recipients", `SELECT r FROM (SELECT * FROM probe LIMIT 1) AS probe, sendonce_recipients(kind, payload) AS r`, "jsonb_array_elements_text("},
		{"sendonce_email_recipients", `SELECT r FROM (SELECT * FROM probe LIMIT 1) AS probe, sendonce_email_recipients(payload) AS r`, "jsonb_array_elements_text("},
		// Each recipient a probe of the list's key, never a scan of the list.
		{"sendonce_suppressed_addresses", `SELECT (SELECT array_agg(DISTINCT a ORDER BY a) FROM sendonce_suppressed_addresses(kind, payload, topic) AS a) FROM (SELECT * FROM probe LIMIT 1) AS probe`,
			"Index Only Scan using sendonce_suppression_pkey"},
	} {
		rows, err := pool.Query(ctx, `EXPLAIN (VERBOSE) `+c.sql)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		p := strings.Join(plan, "\n")
		if strings.Contains(p, c.fn+"(") {
			t.Errorf("%s is not inlined in %s:\n%s", c.fn, c.sql, p)
		}
		if !strings.Contains(p, c.want) {
			t.Errorf("the plan of %s has no %q:\n%s", c.sql, c.want, p)
		}
		// The planner's estimate for one intent: a claim of many adds it up
		// for each, and past jit_above_cost (100,000) the claim is compiled,
		// 1.3 s, for a lookup of microseconds (as it was with the lookup
		// inlined but the recipients estimated at 100 emails of 100 each).
		if m := planCost.FindStringSubmatch(plan[0]); m == nil {
			t.Errorf("no cost in %q", plan[0])
		} else if cost, _ := strconv.ParseFloat(m[1], 64); cost > 1000 {
			t.Errorf("%s is estimated at %.0f, want at most 1,000:\n%s", c.sql, cost, p)
		}
	}
}

// planCost is the total cost of a plan's first line.
var planCost = regexp.MustCompile(`cost=[0-9.]+\.\.([0-9.]+)`)

// TestRecipients: an intent's recipients, as the suppression lookup and the
// webhooks' suppression read them: each string of to, cc and bcc (of each
// email of a batch) as sendonce_address spells it, NULL for a string that
// is not an address, nothing for other values; a broadcast has none.
func TestRecipients(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	for _, c := range []struct {
		kind, payload string
		want          []string
	}{
		{"email", `{"to": ["A@Example.com", "Bob <bob@example.org>", 5, null, ["x@y.z"], {"a": "b@c.d"}], "cc": "cc@example.com", "bcc": null}`,
			[]string{"a@example.com", "bob@example.org", "cc@example.com"}},
		{"email", `{"to": "solo@example.com", "cc": [], "bcc": ["b1@example.com", "b1@example.com", "not an address"]}`,
			[]string{"(null)", "b1@example.com", "b1@example.com", "solo@example.com"}},
		{"template", `{"to": ["t@example.com"], "cc": 7}`, []string{"t@example.com"}},
		{"broadcast", `{"to": ["t@example.com"]}`, nil},
		{"batch", `{"emails": [{"to": "a@example.com", "cc": ["c@example.com"]}, {"to": ["b@example.com", "B@example.com"], "bcc": "d@example.com"}, 5, "s", {"to": null}]}`,
			[]string{"a@example.com", "b@example.com", "b@example.com", "c@example.com", "d@example.com"}},
		{"batch", `{"emails": {"to": "a@example.com"}}`, nil},
		{"batch", `{"to": "a@example.com"}`, nil},
		{"email", `{"to": "\"Lovelace, Ada\" <ada@example.com>", "cc": ["  spaced@example.com  "]}`,
			[]string{"ada@example.com", "spaced@example.com"}},
	} {
		var got []string
		err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(coalesce(r, '(null)') ORDER BY r NULLS FIRST), '{}')
			FROM sendonce_recipients($1, $2) AS r`, c.kind, c.payload).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("sendonce_recipients(%s, %s) = %q, want %q", c.kind, c.payload, got, c.want)
		}
	}
}
