package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/mail"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/suppress"
	"github.com/sendonce/sendonce/internal/testkit/addrforms"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// formCase is one row of the address forms' table (addrforms): an address
// form and its normal form ("": refused).
type formCase = addrforms.Case

// loadForms is the table's forms, and two more over the suppression list's
// length.
func loadForms(t testing.TB) []formCase {
	out := addrforms.Load(t)
	// An address over the suppression list's 320 characters.
	long := strings.Repeat("a", 64) + "@" + strings.Repeat("d", 255) + ".com" // 324
	return append(out, formCase{Form: long, Why: "320"}, formCase{Form: "Ada <" + long + ">", Why: "320"})
}

// placement puts an address into one recipient field of one kind of
// intent; goField and sqlField are how the Go API and the SQL trigger name
// that field.
type placement struct {
	name              string
	kind              outbox.Kind
	templateID        string
	body              func(addr string) map[string]any
	goField, sqlField string
}

func email(to any) map[string]any {
	return map[string]any{"from": "billing@example.net", "to": to, "subject": "Invoice", "text": "Attached."}
}

var placements = []placement{
	{"email to", outbox.KindEmail, "", func(a string) map[string]any { return email([]string{a}) }, "payload.to[0]", "to[0]"},
	{"email to, one string", outbox.KindEmail, "", func(a string) map[string]any { return email(a) }, "payload.to", `"to"`},
	{"email cc", outbox.KindEmail, "", func(a string) map[string]any {
		e := email([]string{"filler@example.net"})
		e["cc"] = []string{"other@example.net", a}
		return e
	}, "payload.cc[1]", "cc[1]"},
	{"email bcc", outbox.KindEmail, "", func(a string) map[string]any {
		e := email([]string{"filler@example.net"})
		e["bcc"] = a
		return e
	}, "payload.bcc", `"bcc"`},
	{"template to", outbox.KindTemplate, "welcome", func(a string) map[string]any {
		return map[string]any{"from": "billing@example.net", "to": []string{"filler@example.net", a}}
	}, "payload.to[1]", "to[1]"},
	{"batch email to", outbox.KindBatch, "", func(a string) map[string]any {
		return map[string]any{"emails": []any{email([]string{"filler@example.net"}), email([]string{a})}}
	}, "payload.emails[1].to[0]", "emails[1].to[0]"},
	{"batch email bcc", outbox.KindBatch, "", func(a string) map[string]any {
		e := email([]string{"filler@example.net"})
		e["bcc"] = []string{a}
		return map[string]any{"emails": []any{e}}
	}, "payload.emails[0].bcc[0]", "emails[0].bcc[0]"},
}

// marshal encodes v as JSON without HTML escapes, as PostgreSQL prints it.
func marshal(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// inTx runs f in a transaction that is rolled back.
func inTx(t *testing.T, pool *pgxpool.Pool, f func(tx pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back on purpose
	f(tx)
}

// TestAddressForms runs the one table of address forms through everything
// that compares an address with the suppression list, so that Go and SQL
// cannot drift apart: the normal form in Go (suppress.Address) and in SQL
// (sendonce_address), the Go API's validation and the plain-SQL insert's
// for every recipient field of every kind that has recipients, the first
// claim's lookup (sendonce_suppressed) with the Go body rewrite
// (suppress.Strip), Suppress, and the webhooks' address extraction.
// Issue 22: with ada@example.com suppressed, intents to "ada@example.com
// (Ada)", "\"ada\"@example.com", "\tada@example.com" and "Ada
// <ada@example.com> (work)" were sent.
func TestAddressForms(t *testing.T) {
	t.Parallel()
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	for _, c := range loadForms(t) {
		if got := suppress.Address(c.Form); got != c.Normal {
			t.Errorf("Go: suppress.Address(%q) = %q, want %q", c.Form, got, c.Normal)
		}
		var sqlNormal *string
		if err := pool.QueryRow(ctx, `SELECT sendonce_address($1)`, c.Form).Scan(&sqlNormal); err != nil {
			t.Fatal(err)
		}
		if got := deref(sqlNormal); got != c.Normal || (sqlNormal != nil && *sqlNormal == "") {
			t.Errorf("SQL: sendonce_address(%q) = %v, want %q (NULL when refused)", c.Form, show(sqlNormal), c.Normal)
		}

		for _, p := range placements {
			body := marshal(t, p.body(c.Form))
			in := outbox.Intent{Key: "form:1", Kind: p.kind, TemplateID: p.templateID, Payload: json.RawMessage(body)}
			goErr := in.Validate()
			var sqlErr error
			inTx(t, pool, func(tx pgx.Tx) {
				_, sqlErr = tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id)
					VALUES ('form:1', $1, $2, nullif($3, ''))`, string(p.kind), body, p.templateID)
			})
			if c.Normal != "" {
				if goErr != nil {
					t.Errorf("Go, %s %q: refused (%v), want it accepted as %q", p.name, c.Form, goErr, c.Normal)
				}
				if sqlErr != nil {
					t.Errorf("SQL insert, %s %q: refused (%v), want it accepted as %q", p.name, c.Form, sqlErr, c.Normal)
				}
				checkMatch(t, pool, p, body, c)
				continue
			}
			var inv *outbox.InvalidError
			quoted := fmt.Sprintf("%q", c.Form)
			switch {
			case !errors.As(goErr, &inv):
				t.Errorf("Go, %s %q: %v, want an InvalidError", p.name, c.Form, goErr)
			case inv.Field != p.goField || !strings.HasPrefix(inv.Reason, quoted[:min(len(quoted), 40)]) || !strings.Contains(goErr.Error(), c.Why):
				t.Errorf("Go, %s %q: %v; want field %s, the value and %q", p.name, c.Form, goErr, p.goField, c.Why)
			}
			value := string(marshal(t, c.Form))
			switch {
			case sqlErr == nil:
				t.Errorf("SQL insert, %s %q: accepted, want a refusal", p.name, c.Form)
			case !strings.Contains(sqlErr.Error(), p.sqlField) || !strings.Contains(sqlErr.Error(), value[:min(len(value), 40)]):
				t.Errorf("SQL insert, %s %q: %v; want %s and the value in it", p.name, c.Form, sqlErr, p.sqlField)
			}
		}

		// Suppress takes the forms an intent may name, and refuses the rest.
		var inv *outbox.InvalidError
		_, err := ob.Suppress(ctx, []string{c.Form}, "form test")
		switch {
		case c.Normal == "" && (!errors.As(err, &inv) || inv.Field != "address[0]" || !strings.Contains(err.Error(), c.Why)):
			t.Errorf("Suppress(%q): %v, want an InvalidError for address[0] naming %q", c.Form, err, c.Why)
		case c.Normal != "" && err != nil:
			t.Errorf("Suppress(%q): %v", c.Form, err)
		}
		if got := outboxtest.Value[[]string](t, pool, `SELECT coalesce(array_agg(address), '{}') FROM sendonce_suppression`); fmt.Sprint(got) != fmt.Sprint(nonEmpty(c.Normal)) {
			t.Errorf("Suppress(%q) put %q on the list, want %q", c.Form, got, nonEmpty(c.Normal))
		}
		if c.Normal != "" {
			if n, err := ob.Unsuppress(ctx, []string{c.Form}); err != nil || n != 1 {
				t.Errorf("Unsuppress(%q): %d, %v; want 1 removed", c.Form, n, err)
			}
		}
		if _, err := pool.Exec(ctx, `DELETE FROM sendonce_suppression`); err != nil {
			t.Fatal(err)
		}

		// A webhook event naming the form suppresses its normal form, or
		// nothing.
		inTx(t, pool, func(tx pgx.Tx) {
			raw := marshal(t, map[string]any{"id": "ev_1", "type": "suppression.added", "data": map[string]any{"to": []string{c.Form}}})
			if _, err := tx.Exec(ctx, `INSERT INTO sendonce_event (delivery_id, event_id, type, occurred_at, raw)
				VALUES ('d_1', 'ev_1', 'suppression.added', now(), $1)`, raw); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT sendonce_event_suppress('ev_1')`); err != nil {
				t.Fatalf("event naming %q: %v", c.Form, err)
			}
			var got []string
			if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(address), '{}') FROM sendonce_suppression`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(nonEmpty(c.Normal)) {
				t.Errorf("event naming %q suppressed %q, want %q", c.Form, got, nonEmpty(c.Normal))
			}
		})
	}
}

// checkMatch: with the normal form of c on the suppression list, the first
// claim's lookup names it, and the Go body rewrite takes the form out.
func checkMatch(t *testing.T, pool *pgxpool.Pool, p placement, body []byte, c formCase) {
	t.Helper()
	ctx := context.Background()
	inTx(t, pool, func(tx pgx.Tx) {
		if _, err := tx.Exec(ctx, `INSERT INTO sendonce_suppression (address, reason) VALUES ($1, 'manual')`, c.Normal); err != nil {
			t.Fatalf("suppress %q: %v", c.Normal, err)
		}
		var found []string
		if err := tx.QueryRow(ctx, `SELECT sendonce_suppressed($1, $2)`, string(p.kind), body).Scan(&found); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(found) != fmt.Sprint([]string{c.Normal}) {
			t.Errorf("SQL lookup, %s %q: sendonce_suppressed = %q, want [%s]", p.name, c.Form, found, c.Normal)
			return
		}
		out, none, err := suppress.Strip(string(p.kind), body, found)
		if err != nil {
			t.Fatalf("Strip, %s %q: %v", p.name, c.Form, err)
		}
		if !none && bytes.Contains(out, marshal(t, c.Form)) {
			t.Errorf("Strip, %s %q: the suppressed recipient is still in %s", p.name, c.Form, out)
		}
	})
}

// nonEmpty is s as a list: none when s is "".
func nonEmpty(s string) []string {
	if s == "" {
		return []string{}
	}
	return []string{s}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func show(s *string) string {
	if s == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", *s)
}

// charsetOnly reports whether net/mail refused a spelling only for an
// encoded word in its display name in a charset it does not decode: taken
// by the rule (the address is not in doubt), refused by the API's parser
// for the whole send (see internal/base/suppress's test of the same name).
func charsetOnly(err error) bool {
	return err != nil && strings.Contains(err.Error(), "charset not supported")
}

// TestAddressRuleGoAndSQLAgree feeds thousands of strings made of the
// pieces addresses are made of (and the characters that break them) to the
// normaliser in Go and in SQL, and fails on any string they read
// differently, or that Go accepts and the API's parser (net/mail) reads as
// another address.
func TestAddressRuleGoAndSQLAgree(t *testing.T) {
	t.Parallel()
	pool, _ := outboxtest.New(t)
	pieces := []string{"ada", "Ada", "ADA", "Lovelace", "zoë", "Å", "\u212a", "İ", "ß", "@", "@", ".", ".", "example", "com",
		"xn--bcher-kva", "bücher", "-", "_", "+", "'", "!", "#", "=?utf-8?q?A?=", " ", " ", "  ", "<", ">", "<", ">", `"`, `"`,
		`\`, "(", ")", ",", ";", ":", "[", "]", "192.0.2.1", "\t", "\n", "\r", "\u00a0", "\u200b", "\u2028", "\u0085",
		"\u3000", "\ufeff", "\U0001F600", "\x7f"}
	seeds := []string{}
	for _, c := range loadForms(t) {
		seeds = append(seeds, c.Form)
	}
	rng := rand.New(rand.NewPCG(22, 13))
	var inputs []string
	for len(inputs) < 20000 {
		var b strings.Builder
		if rng.IntN(2) == 0 {
			// A form of the table with pieces put in or cut out.
			s := seeds[rng.IntN(len(seeds))]
			for range rng.IntN(3) {
				i := rng.IntN(len(s) + 1)
				for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
					i-- // not inside a UTF-8 sequence
				}
				if rng.IntN(3) == 0 && i < len(s) {
					s = s[:i] + s[i+1:]
					for i < len(s) && s[i]&0xC0 == 0x80 {
						s = s[:i] + s[i+1:]
					}
				} else {
					s = s[:i] + pieces[rng.IntN(len(pieces))] + s[i:]
				}
			}
			b.WriteString(s)
		} else {
			for range 1 + rng.IntN(12) {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
		}
		inputs = append(inputs, b.String())
	}
	rows, err := pool.Query(context.Background(),
		`SELECT sendonce_address(a) FROM unnest($1::text[]) WITH ORDINALITY AS u(a, i) ORDER BY i`, inputs)
	if err != nil {
		t.Fatal(err)
	}
	sqlNormal, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		t.Fatal(err)
	}
	accepted, bad := 0, 0
	for i, in := range inputs {
		goNormal := suppress.Address(in)
		if goNormal != "" {
			accepted++
		}
		if goNormal != deref(sqlNormal[i]) || (sqlNormal[i] != nil && *sqlNormal[i] == "") {
			bad++
			if bad <= 20 {
				t.Errorf("%q: Go reads %q, SQL reads %s", in, goNormal, show(sqlNormal[i]))
			}
			continue
		}
		if goNormal == "" {
			continue
		}
		if a, err := mail.ParseAddress(in); !charsetOnly(err) && (err != nil || strings.ToLower(a.Address) != goNormal) {
			bad++
			if bad <= 20 {
				t.Errorf("%q: accepted as %q, but the API's parser reads %v (%v)", in, goNormal, a, err)
			}
		}
	}
	t.Logf("%d strings, %d accepted, %d read differently", len(inputs), accepted, bad)
	if accepted < len(inputs)/20 {
		t.Errorf("only %d of %d strings accepted: the corpus does not exercise the accepted forms", accepted, len(inputs))
	}
}
