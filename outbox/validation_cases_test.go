package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestIntentValidationGoAndSQL runs one table of intents through both
// validations, Intent.Validate in Go and the table's trigger on a plain-SQL
// insert, so the rule producers in other languages meet is the Go API's:
// each row is accepted by both, or refused by both, Go naming the field
// (InvalidError.Field) and SQL's message naming it too.
func TestIntentValidationGoAndSQL(t *testing.T) {
	t.Parallel()
	pool, _ := outboxtest.New(t)
	ctx := context.Background()
	email := func(changes map[string]any) string {
		body := map[string]any{"from": "Shop <shop@example.test>", "to": []string{"ada@example.test"}, "subject": "Hello", "text": "Hi."}
		for k, v := range changes {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	batch := func(n int) string {
		emails := make([]json.RawMessage, n)
		for i := range emails {
			emails[i] = json.RawMessage(email(nil))
		}
		b, _ := json.Marshal(map[string]any{"emails": emails})
		return string(b)
	}
	broadcast := `{"from":"shop@example.test","subject":"News","html":"<p>News</p>","audienceId":"aud_1"}`
	for _, tt := range []struct {
		name     string
		key      string
		kind     outbox.Kind
		template string
		payload  string
		field    string // "" accepted; else the field Go's InvalidError names
		sql      string // "" accepted; else what the trigger's message says
	}{
		{"an email", "v:email", "", "", email(nil), "", ""},
		{"a batch", "v:batch", outbox.KindBatch, "", batch(2), "", ""},
		{"a template send", "v:template", outbox.KindTemplate, "welcome", `{"from":"shop@example.test","to":["ada@example.test"]}`, "", ""},
		{"a broadcast", "v:broadcast", outbox.KindBroadcast, "", broadcast, "", ""},
		{"a display name", "v:display", "", "", email(map[string]any{"to": []string{"Ada Lovelace <ada@example.test>"}}), "", ""},

		{"a key with a space", "v:a key", "", "", email(nil), "key", "invalid idempotency_key"},
		{"a key of 256 characters", strings.Repeat("k", 256), "", "", email(nil), "key", "invalid idempotency_key"},
		{"no key", "", "", "", email(nil), "key", "invalid idempotency_key"},
		{"a key that is a clock reading", "invoice:2026-12-06T00:12:42.005523823Z", "", "", email(nil), "key", "holds a clock reading (2026-12-06T00:12:42.005523823Z): derive the key from the cause of the send"},
		{"a clock reading in lower case, to the millisecond", "k:2026-12-06t00:12:42.005z:ada", "", "", email(nil), "key", "clock reading"},
		{"a clock reading west of UTC", "k:2026-12-06T00:12:42.5-05:00", "", "", email(nil), "key", "clock reading"},
		{"a schedule's occurrence, to the second", "digest:2026-12-06T09:00:00Z:user_42", "", "", email(nil), "", ""},
		{"a day", "digest:2026-12-06:user_42", "", "", email(nil), "", ""},
		{"a version number after a time", "k:2026-12-06T09:00:00.v2", "", "", email(nil), "", ""},
		{"an unknown kind", "v:sms", "sms", "", email(nil), "kind", "unknown kind 'sms'"},
		{"a template send without a template id", "v:no-template", outbox.KindTemplate, "", email(nil), "template_id", "template_id"},
		{"an email with a template id", "v:stray-template", "", "welcome", email(nil), "template_id", "template_id"},
		{"a payload that is an array", "v:array", "", "", `[1, 2]`, "payload", "payload must be a JSON object"},
		{"an email without a sender", "v:no-from", "", "", email(map[string]any{"from": nil}), "payload.from", `payload needs "from"`},
		{"an email without a recipient", "v:no-to", "", "", email(map[string]any{"to": []string{}}), "payload.to", `recipient in "to"`},
		{"an email with a comment in its address", "v:comment", "", "", email(map[string]any{"to": []string{"ada@example.test (Ada)"}}), "payload.to[0]", `"to[0]" "ada@example.test (Ada)" has a comment in parentheses`},
		{"a scheduledAt that is not a time", "v:when", "", "", email(map[string]any{"scheduledAt": "tomorrow"}), "payload.scheduledAt", `"scheduledAt" tomorrow is not an RFC 3339 time`},
		{"a batch without emails", "v:empty-batch", outbox.KindBatch, "", `{"emails":[]}`, "payload.emails", `non-empty "emails" array`},
		{"a batch of 101 emails", "v:big-batch", outbox.KindBatch, "", batch(101), "payload.emails", "101 emails, over the limit of 100"},
		{"a broadcast without an audience", "v:no-audience", outbox.KindBroadcast, "", `{"from":"shop@example.test","subject":"News","html":"<p>News</p>"}`, "payload.audienceId", `needs "audienceId" or a non-empty "audienceIds"`},
		{"a payload over 1 MiB", "v:huge", "", "", email(map[string]any{"text": strings.Repeat("x", outbox.MaxPayloadBytes)}), "payload", "over the 1 MiB limit"},
	} {
		in := outbox.Intent{Key: tt.key, Kind: tt.kind, TemplateID: tt.template, Payload: tt.payload}
		goErr := in.Validate()
		var invalid *outbox.InvalidError
		switch {
		case tt.field == "" && goErr != nil:
			t.Errorf("%s: Go refuses it: %v", tt.name, goErr)
		case tt.field != "" && (!errors.As(goErr, &invalid) || invalid.Field != tt.field):
			t.Errorf("%s: Go says %v, want it refused naming %s", tt.name, goErr, tt.field)
		}

		sqlErr := insertSQL(ctx, pool, tt.key, string(tt.kind), tt.template, tt.payload)
		switch {
		case tt.sql == "" && sqlErr != nil:
			t.Errorf("%s: SQL refuses it: %v", tt.name, sqlErr)
		case tt.sql != "" && (sqlErr == nil || !strings.Contains(sqlErr.Error(), tt.sql)):
			t.Errorf("%s: SQL says %v, want it refused naming %s", tt.name, sqlErr, tt.sql)
		}
	}
}

// insertSQL inserts an intent as a producer in another language does, in a
// transaction it rolls back.
func insertSQL(ctx context.Context, pool *pgxpool.Pool, key, kind, template, payload string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, template_id, payload)
		VALUES ($1, COALESCE(NULLIF($2, ''), 'email'), NULLIF($3, ''), $4::jsonb)`, key, kind, template, payload)
	return err
}

// TestTopicValidationGoAndSQL holds the topic rule in step, as
// TestIntentValidationGoAndSQL does the others: Intent.Validate and the
// table's check accept and refuse the same topics, Go naming the field
// "topic" and SQL its check.
func TestTopicValidationGoAndSQL(t *testing.T) {
	t.Parallel()
	pool, _ := outboxtest.New(t)
	ctx := context.Background()
	email := `{"from":"shop@example.test","to":["ada@example.test"],"subject":"Hello","text":"Hi."}`
	broadcast := `{"from":"shop@example.test","subject":"News","html":"<p>News</p>","audienceId":"aud_1"}`
	for _, tt := range []struct {
		topic   string
		kind    outbox.Kind
		payload string
		ok      bool
	}{
		{"digest", "", email, true},
		{"product-news", "", email, true},
		{"a_1", "", email, true},
		{strings.Repeat("t", 64), "", email, true},
		{strings.Repeat("t", 65), "", email, false},
		{"Digest", "", email, false},
		{"1digest", "", email, false},
		{"digest news", "", email, false},
		{"-", "", email, false},
		{"digest", outbox.KindBroadcast, broadcast, false},
	} {
		in := outbox.Intent{Key: "t:topic", Kind: tt.kind, Payload: tt.payload, Topic: tt.topic}
		goErr := in.Validate()
		var invalid *outbox.InvalidError
		switch {
		case tt.ok && goErr != nil:
			t.Errorf("topic %q: Go refuses it: %v", tt.topic, goErr)
		case !tt.ok && (!errors.As(goErr, &invalid) || invalid.Field != "topic"):
			t.Errorf("topic %q: Go says %v, want it refused naming topic", tt.topic, goErr)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, sqlErr := tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, topic)
			VALUES ('t:topic', COALESCE(NULLIF($1, ''), 'email'), $2::jsonb, $3)`, string(tt.kind), tt.payload, tt.topic)
		_ = tx.Rollback(ctx)
		switch {
		case tt.ok && sqlErr != nil:
			t.Errorf("topic %q: SQL refuses it: %v", tt.topic, sqlErr)
		case !tt.ok && (sqlErr == nil || !strings.Contains(sqlErr.Error(), "sendonce_outbox_topic_check")):
			t.Errorf("topic %q: SQL says %v, want it refused naming sendonce_outbox_topic_check", tt.topic, sqlErr)
		}
	}
}

// TestAddressErrorSaysTheRuleOnce: a recipient that is no address at all
// is refused, in Go and in SQL, with the forms taken said once (it said
// "is not an email address of the form local@domain or Display Name
// <local@domain>; sendonce takes only local@domain and Display Name
// <local@domain>, …").
func TestAddressErrorSaysTheRuleOnce(t *testing.T) {
	t.Parallel()
	pool, _ := outboxtest.New(t)
	payload := `{"from":"shop@example.test","to":["nope"],"subject":"Hello","text":"Hi."}`
	goErr := (&outbox.Intent{Key: "v:nope", Payload: payload}).Validate()
	sqlErr := insertSQL(context.Background(), pool, "v:nope", "", "", payload)
	for name, err := range map[string]error{"Go": goErr, "SQL": sqlErr} {
		if err == nil || !strings.Contains(err.Error(), `"nope" is not an email address; sendonce takes only local@domain and Display Name <local@domain>`) ||
			strings.Count(err.Error(), "local@domain") != 2 {
			t.Errorf("%s: %v, want the forms taken said once", name, err)
		}
	}
}
