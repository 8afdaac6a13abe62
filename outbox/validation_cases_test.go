package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// TestValidationMessages pins Intent.Validate's whole message for the
// payload paths that validation reads in place (scanPayload, the
// recipients, the content fields): strings with and without escapes,
// arrays with spaces and nulls, addresses over the 32 bytes Go copies on
// the stack, repeated and escaped member names, syntax and storage errors
// together. The messages are the ones of the validation before scanPayload,
// which read the payload with json.Valid, storableJSON and jsonMembers.
func TestValidationMessages(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		kind     outbox.Kind
		template string
		payload  string
		want     string // "<nil>": accepted
	}{
		{"", "", "{\"from\":\"a@example.com\",\"to\":\"b@example.com\",\"text\":\"x\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":\"\",\"text\":\"x\"}", "outbox: invalid payload.to: is empty"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":\"b@example.com (B)\",\"text\":\"x\"}", "outbox: invalid payload.to: \"b@example.com (B)\" has a comment in parentheses; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches: use \"B <b@example.com>\""},
		{"", "", "{\"from\":\"a@example.com\",\"to\":\"b\\u0040example.com\",\"text\":\"x\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":\"B \\u003cb@example.com>\",\"text\":\"x\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":\"b\\u0040example.com (B)\",\"text\":\"x\"}", "outbox: invalid payload.to: \"b@example.com (B)\" has a comment in parentheses; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches: use \"B <b@example.com>\""},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b\\u0040example.com\",\"c@example.com (C)\"],\"text\":\"x\"}", "outbox: invalid payload.to[1]: \"c@example.com (C)\" has a comment in parentheses; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches: use \"C <c@example.com>\""},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[ \"b@example.com\" , null ],\"text\":\"x\"}", "outbox: invalid payload.to: must hold only non-empty address strings"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\",\"\"],\"text\":\"x\"}", "outbox: invalid payload.to: must hold only non-empty address strings"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\",1],\"text\":\"x\"}", "outbox: invalid payload.to: must be an address string or an array of them"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\",[\"c@example.com\"]],\"text\":\"x\"}", "outbox: invalid payload.to: must be an address string or an array of them"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":{\"a\":\"b@example.com\"},\"text\":\"x\"}", "outbox: invalid payload.to: must be an address string or an array of them"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":7,\"text\":\"x\"}", "outbox: invalid payload.to: must be an address string or an array of them"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[],\"text\":\"x\"}", "outbox: invalid payload.to: needs at least one recipient"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":null,\"text\":\"x\"}", "outbox: invalid payload.to: needs at least one recipient"},
		{"", "", "{\"from\":\"a@example.com\",\"text\":\"x\"}", "outbox: invalid payload.to: needs at least one recipient"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[null],\"text\":\"x\"}", "outbox: invalid payload.to: must hold only non-empty address strings"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"cc\":[],\"bcc\":null,\"text\":\"x\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"cc\":\"\",\"text\":\"x\"}", "outbox: invalid payload.cc: is empty"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"cc\":[\"\"],\"text\":\"x\"}", "outbox: invalid payload.cc: must hold only non-empty address strings"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"bcc\":[\"c@example.com\",\"d@example.com\",\"e@exa mple.com\"],\"text\":\"x\"}", "outbox: invalid payload.bcc[2]: \"e@exa mple.com\" has a space inside the address; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"cc\":\"a-very-long-local-part-of-an-address-over-thirty-two-bytes@example.com\",\"text\":\"x\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"cc\":\"a-very-long-local-part-of-an-address-over-thirty-two-bytes@exa mple.com\",\"text\":\"x\"}", "outbox: invalid payload.cc: \"a-very-long-local-part-of-an-address-over-thirty-two-bytes@e…\" has a space inside the address; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"B@Example.COM\"],\"text\":\"x\"}", "<nil>"},
		{"", "", "{\"from\":\"\",\"to\":[\"b@example.com\"],\"text\":\"x\"}", "outbox: invalid payload.from: needs a sender address"},
		{"", "", "{\"from\":1,\"to\":[\"b@example.com\"],\"text\":\"x\"}", "outbox: invalid payload.from: needs a sender address"},
		{"", "", "{\"from\":\"\\n\",\"to\":[\"b@example.com\"],\"text\":\"\\t\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"\"}", "outbox: invalid payload.html: needs content: \"html\" or \"text\""},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"\",\"html\":\"\\u003cp>\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":null}", "outbox: invalid payload.html: needs content: \"html\" or \"text\""},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\",\"to\":\"c@example.com (C)\"}", "outbox: invalid payload.to: \"c@example.com (C)\" has a comment in parentheses; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches: use \"C <c@example.com>\""},
		{"", "", "{\"fr\\u006fm\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\"}", "<nil>"},
		{"", "", " { \"from\" : \"a@example.com\" , \"to\" : [ \"b@example.com\" ] , \"text\" : \"x\" } ", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\",}", "outbox: invalid payload: malformed JSON: invalid character '}' looking for beginning of object key string"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\\u0000\"}", "outbox: invalid payload: holds the escape \\u0000, which PostgreSQL cannot store"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\\udc00\"}", "outbox: invalid payload: holds the unpaired surrogate escape \\udc00"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\\ud83d\\ude00\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\xff\",\"html\":\"\\u0000\"}", "outbox: invalid payload: is not valid UTF-8"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\xff\",}", "outbox: invalid payload: malformed JSON: invalid character '}' looking for beginning of object key string"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\",\"scheduledAt\":\"2026-12-06T09:00:00Z\"}", "<nil>"},
		{"", "", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\",\"scheduledAt\":5}", "outbox: invalid payload.scheduledAt: must be an RFC 3339 time string"},
		{"", "", "\"x\"", "outbox: invalid payload: must be a JSON object, not a string"},
		{"", "", "[]", "outbox: invalid payload: must be a JSON object, not an array"},
		{"", "", "", "outbox: invalid payload: malformed JSON: unexpected end of JSON input"},
		{"", "", "{}", "outbox: invalid payload.from: needs a sender address"},
		{"", "", "{\"a\":[[[[[{\"b\":1e5}]]]]],\"c\":-0.5E-3,\"d\":true,\"e\":false}", "outbox: invalid payload.from: needs a sender address"},
		{"batch", "", "{\"emails\":[{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\"},null]}", "outbox: invalid payload.emails[1].from: needs a sender address"},
		{"batch", "", "{\"emails\":[{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\"},{\"from\":\"a@example.com\",\"to\":[\"b@example.com\",\"c@exa mple.com\"],\"text\":\"x\"}]}", "outbox: invalid payload.emails[1].to[1]: \"c@exa mple.com\" has a space inside the address; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches"},
		{"batch", "", "{\"emails\":[{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"text\":\"x\"},3]}", "outbox: invalid payload.emails: a batch needs a non-empty array of email objects"},
		{"batch", "", "{\"emails\":{}}", "outbox: invalid payload.emails: a batch needs a non-empty array of email objects"},
		{"template", "welcome", "{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"]}", "<nil>"},
		{"template", "welcome", "{\"from\":\"a@example.com\",\"cc\":\"c@example.com\"}", "outbox: invalid payload.to: needs at least one recipient"},
		{"broadcast", "", "{\"from\":\"a@example.com\",\"subject\":\"s\",\"text\":\"x\",\"audienceIds\":[\"aud_1\",null]}", "<nil>"},
		{"broadcast", "", "{\"from\":\"a@example.com\",\"subject\":\"s\",\"text\":\"x\",\"audienceIds\":[]}", "outbox: invalid payload.audienceId: a broadcast needs \"audienceId\" or a non-empty \"audienceIds\""},
		{"broadcast", "", "{\"from\":\"a@example.com\",\"subject\":\"\",\"text\":\"x\",\"audienceId\":\"a\"}", "outbox: invalid payload.subject: a broadcast needs a subject"},
	} {
		in := outbox.Intent{Key: "k", Kind: tt.kind, TemplateID: tt.template, Payload: tt.payload}
		if got := fmt.Sprint(in.Validate()); got != tt.want {
			t.Errorf("%s %q:\n got %s\nwant %s", tt.kind, tt.payload, got, tt.want)
		}
	}
}
