package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sendonce/sendonce/internal/base/suppress"
)

// Kind says which OpenEmail call sends an intent.
type Kind string

// The kinds of intent, one per OpenEmail send call.
const (
	KindEmail     Kind = "email"     // emails.send: POST /emails
	KindBatch     Kind = "batch"     // emails.send_batch: POST /emails/batch
	KindTemplate  Kind = "template"  // templates.send: POST /templates/{id}/send
	KindBroadcast Kind = "broadcast" // broadcasts.send: POST /broadcasts
)

// Valid reports whether k is one of the four kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindEmail, KindBatch, KindTemplate, KindBroadcast:
		return true
	}
	return false
}

// MaxPayloadBytes bounds an intent's payload, in the Go API and in the
// table's trigger alike.
const MaxPayloadBytes = 1 << 20

// MaxBatchEmails bounds the emails of one batch intent.
const MaxBatchEmails = 100

// validKey is the API's rule for an idempotency key: 1 to 255 characters
// of letters, digits, "_", ".", ":" and "-" (a loop: the regular
// expression it was cost a tenth of EnqueueMany's Go time).
func validKey(key string) bool {
	if len(key) == 0 || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// TopicPattern is the rule for a topic, in Go as in the table's check
// (sendonce_outbox_topic_check).
const TopicPattern = `^[a-z][a-z0-9_-]{0,63}$`

var topicRE = regexp.MustCompile(TopicPattern)

// topicCheck names the table's check of a topic, which the refusals of a
// topic quote. A constant of its own: beside "starting with" in one
// literal it looked like SQL (a table's name beside the keyword WITH) to
// TestOneOwner.
const topicCheck = "sendonce_outbox_topic_check"

// ValidateTopic checks a topic (of an intent, a run or a schedule)
// against TopicPattern; the empty topic is valid (none).
func ValidateTopic(topic string) error {
	if topic != "" && !topicRE.MatchString(topic) {
		return invalid("topic", fmt.Sprintf(
			"%q: want 1 to 64 lowercase letters, digits, \"_\" and \"-\", starting with a letter ("+topicCheck+")", shorten(topic)))
	}
	return nil
}

// TenantPattern is the rule for a tenant's name, in Go as in the tables'
// checks (sendonce_outbox_tenant_check, and the run's and the schedule's):
// 1 to 64 lowercase letters, digits, "_", "." and "-", starting with a
// letter or a digit. Lowercase only, so that a tenant has one spelling;
// a digit first, "." and "-", so that a customer number, a UUID or a
// domain is a name as it is. DefaultTenant is refused besides.
const TenantPattern = `^[a-z0-9][a-z0-9_.-]{0,63}$`

// DefaultTenant is the name shown for the tenant of every intent that
// names none (an empty Tenant, NULL in the table). It is no name an intent
// can give: the default tenant is named by giving none, so that it has one
// spelling.
const DefaultTenant = "default"

// TenantName is how a tenant is shown: DefaultTenant for "" (the default
// tenant), any other as it is.
func TenantName(tenant string) string {
	if tenant == "" {
		return DefaultTenant
	}
	return tenant
}

// tenantCheck names the table's check of a tenant, which the refusals of a
// tenant quote.
const tenantCheck = "sendonce_outbox_tenant_check"

// ValidateTenant checks a tenant's name (of an intent, a run or a
// schedule) against TenantPattern; the empty name is valid (the default
// tenant), the name DefaultTenant is not.
func ValidateTenant(tenant string) error {
	if tenant == "" {
		return nil
	}
	if tenant == DefaultTenant {
		return invalid("tenant", fmt.Sprintf(
			"%q: the default tenant is the one of intents that name none: leave the tenant empty ("+tenantCheck+")", tenant))
	}
	if !validTenant(tenant) {
		return invalid("tenant", fmt.Sprintf(
			"%q: want 1 to 64 lowercase letters, digits, \"_\", \".\" and \"-\", starting with a letter or a digit ("+tenantCheck+")",
			shorten(tenant)))
	}
	return nil
}

// validTenant matches TenantPattern (a loop: it runs for every tenanted
// intent enqueued).
func validTenant(t string) bool {
	if len(t) == 0 || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Intent is a send the application wants made: the API body of one of the
// four send calls, and the idempotency key that makes it happen once.
type Intent struct {
	// Key is the idempotency key, derived from the cause of the send
	// ("invoice:inv_4192"), never from a clock: Enqueue refuses an empty
	// key, and one that holds a clock reading (ClockPattern). RandomKey
	// gives a random one, for a send with no cause to name it by.
	Key string
	// Kind selects the send call; empty means KindEmail.
	Kind Kind
	// Payload is the body of the call, exactly as the API takes it
	// (camelCase names; for a batch, {"emails": [...]}).
	//
	// A json.RawMessage, a []byte or a string is taken as JSON text as it
	// is; any other value (a struct, a map) is encoded with encoding/json.
	Payload any
	// TemplateID is the template's id or slug, for KindTemplate only.
	TemplateID string
	// SendAt holds the send until then; zero sends as soon as possible.
	SendAt time.Time
	// Topic names what the send is about for its recipient ("digest",
	// "product-news"): 1 to 64 lowercase letters, digits, "_" and "-",
	// starting with a letter (TopicPattern). Empty: a transactional send,
	// which no unsubscribe stops. An intent with a topic carries
	// List-Unsubscribe headers (RFC 8058) and is not sent to an address
	// unsubscribed from its topic. A run's topic (Run.Topic) is its
	// members' unless they name their own. Not for a broadcast.
	Topic string
	// Tenant names whom the send is for, among the customers of an
	// application that sends for many ("acme"; TenantPattern). Empty: the
	// default tenant (shown as DefaultTenant), the one of every intent
	// that names none. A run's members are its tenant's (Run.Tenant): a
	// member that names none takes the run's, one that names another is
	// refused.
	Tenant string

	raw json.RawMessage // Payload as JSON text, once validated
	run string          // the run's key, when enqueued by EnqueueRun
}

// InvalidError is returned for an intent that cannot be enqueued. Nothing
// has been written when it is returned.
type InvalidError struct {
	// Index is the intent's position in an EnqueueMany call, or -1.
	Index int
	// Field names what is wrong: "key", "kind", "template_id", "payload",
	// or a payload field such as "payload.to".
	Field string
	// Reason says why, in a sentence fragment.
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("outbox: intent %d: invalid %s: %s", e.Index, e.Field, e.Reason)
	}
	return fmt.Sprintf("outbox: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// keyRule is the seeds' first rule for a key, which the refusals below
// quote.
const keyRule = `derive the key from the cause of the send ("invoice:inv_4192"), never from a clock`

// ValidateKey checks an idempotency key against the API's rule, and
// refuses a key that holds a clock reading (see ClockPattern). An empty
// key is refused: pass RandomKey() for a random one.
func ValidateKey(key string) error {
	if key == "" {
		return invalid("key", "missing: "+keyRule+
			"; for a random key, which guards only this intent's own retries, pass outbox.RandomKey()")
	}
	if !validKey(key) {
		return invalid("key", fmt.Sprintf(
			"%q: want 1 to 255 characters of letters, digits, \"_\", \".\", \":\" and \"-\" (invalid_idempotency_key)", shorten(key)))
	}
	if at := clockReading(key); at != "" {
		return invalid("key", fmt.Sprintf(
			"%q holds a clock reading (%s): %s: a producer that runs again reads the clock again, gets another key, and sends a second time (sendonce_outbox_key_clock)",
			shorten(key), at, keyRule))
	}
	return nil
}

// ClockPattern is what makes a key a clock reading, in Go as in the
// table's trigger (sendonce_outbox_key_clock): an RFC 3339 date and time
// with a fraction of a second (2026-12-06T00:12:42.005523823Z, what
// time.Now().Format(time.RFC3339Nano) gives). No cause of a send names its
// time to the fraction of a second. A time to the second is taken: it is
// how causes name their time, a schedule's occurrence above all (its run's
// key, which its members' keys are derived from, ends in one), or an
// appointment's start.
const ClockPattern = `[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]`

// clockReading returns the clock reading (ClockPattern, with all its
// fraction's digits and its zone) key holds, or "". A scan rather than a regular
// expression: it runs for every intent enqueued.
func clockReading(key string) string {
	for i := 10; i+10 < len(key); i++ {
		if key[i] != 'T' && key[i] != 't' {
			continue
		}
		if !digitsAt(key, i-10, "dddd-dd-dd") || !digitsAt(key, i+1, "dd:dd:dd.d") {
			continue
		}
		end := i + 10
		for end < len(key) && '0' <= key[end] && key[end] <= '9' {
			end++
		}
		switch {
		case end < len(key) && (key[end] == 'Z' || key[end] == 'z'):
			end++
		case digitsAt(key, end, "-dd:dd"):
			end += 6
		}
		return key[i-10 : end]
	}
	return ""
}

// digitsAt reports whether s holds, from i on, the shape: 'd' a digit,
// any other byte itself.
func digitsAt(s string, i int, shape string) bool {
	if i < 0 || i+len(shape) > len(s) {
		return false
	}
	for j := 0; j < len(shape); j++ {
		c := s[i+j]
		if shape[j] == 'd' {
			if c < '0' || c > '9' {
				return false
			}
		} else if c != shape[j] {
			return false
		}
	}
	return true
}

// RandomKey returns a new random key, "oe-" and a UUID, the shape the
// OpenEmail SDKs give a call without a key of its own. Enqueue stores it,
// so every attempt of the intent reuses it: it guards the intent's own
// retries, and nothing more. A producer that runs again (a retried job, a
// request sent twice) makes another key and a second send; a key derived
// from the cause (Intent.Key) finds the first intent instead.
func RandomKey() string { return "oe-" + uuid.NewString() }

// Validate checks an intent the way the table's trigger does, so the Go API
// refuses bad input before it touches the caller's transaction.
func (in *Intent) Validate() error {
	_, err := in.validate(nil)
	return err
}

// payloadJSON returns the payload as JSON text.
func (in *Intent) payloadJSON() (json.RawMessage, error) {
	switch p := in.Payload.(type) {
	case nil:
		return nil, invalid("payload", "missing: want the JSON body of the send call")
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	case string:
		return json.RawMessage(p), nil
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, invalid("payload", "cannot be encoded as JSON: "+strings.TrimPrefix(err.Error(), "json: "))
		}
		return b, nil
	}
}

// validate checks the intent and returns its payload as JSON text.
// members is a buffer for the payload's members, which a caller checking
// many intents gives each of them (nil allocates one).
func (in *Intent) validate(members jsonObject) (json.RawMessage, error) {
	payload, err := in.payloadJSON()
	if err != nil {
		return nil, err
	}
	return payload, in.check(payload, members)
}

func (in *Intent) check(payload json.RawMessage, members jsonObject) error {
	if err := ValidateKey(in.Key); err != nil {
		return err
	}
	kind := in.kind()
	if !kind.Valid() {
		return invalid("kind", fmt.Sprintf("unknown kind %q: want email, batch, template or broadcast", in.Kind))
	}
	if err := ValidateTopic(in.Topic); err != nil {
		return err
	}
	if err := ValidateTenant(in.Tenant); err != nil {
		return err
	}
	if kind == KindBroadcast && in.Topic != "" {
		return invalid("topic", "a broadcast goes to an audience the API keeps, and unsubscribes there: no topic (sendonce_outbox_topic_check)")
	}
	if kind == KindTemplate && in.TemplateID == "" {
		return invalid("template_id", "kind template needs a template id")
	}
	if kind != KindTemplate && in.TemplateID != "" {
		return invalid("template_id", "a template id is only for kind template")
	}
	if !utf8.ValidString(in.TemplateID) || strings.ContainsRune(in.TemplateID, 0) {
		return invalid("template_id", "must be UTF-8 text without NUL characters")
	}
	if len(payload) > MaxPayloadBytes {
		return invalid("payload", fmt.Sprintf("%d bytes, over the 1 MiB limit", len(payload)))
	}
	// One pass checks the syntax (as json.Valid), what PostgreSQL can
	// store, and reads the object's members in place (scanPayload). A
	// malformed text's error is encoding/json's; invalid UTF-8 is told
	// before an escape PostgreSQL refuses, wherever each is.
	body, scan := scanPayload(payload, members)
	switch {
	case !scan.valid:
		var v any
		err := json.Unmarshal(payload, &v)
		return invalid("payload", "malformed JSON: "+strings.TrimPrefix(fmt.Sprint(err), "json: "))
	case scan.notUTF8:
		return invalid("payload", "is not valid UTF-8")
	case scan.escape != "":
		return invalid("payload", scan.escape)
	case !scan.isObject:
		return invalid("payload", "must be a JSON object, not "+jsonType(payload))
	}
	if raw := body.get("scheduledAt"); raw != nil && !bytes.Equal(raw, []byte("null")) {
		at, isString := jsonString(raw)
		if !isString {
			return invalid("payload.scheduledAt", "must be an RFC 3339 time string")
		}
		if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
			return invalid("payload.scheduledAt", fmt.Sprintf("%q is not an RFC 3339 time", at))
		}
	}
	return checkBody(kind, body)
}

// checkBody checks the payload's fields that a kind requires.
func checkBody(kind Kind, body jsonObject) error {
	switch kind {
	case KindEmail:
		return checkEmail(body, "payload.", true)
	case KindTemplate:
		return checkEmail(body, "payload.", false)
	case KindBatch:
		emails, isArray := jsonElements(body.get("emails"))
		if !isArray || len(emails) == 0 {
			return invalid("payload.emails", "a batch needs a non-empty array of email objects")
		}
		objects := make([]jsonObject, len(emails))
		for i, e := range emails {
			var isObject bool
			// A null element is an email with no fields, as json.Unmarshal
			// into a map makes it.
			if objects[i], isObject = jsonMembers(e); !isObject && string(e) != "null" {
				return invalid("payload.emails", "a batch needs a non-empty array of email objects")
			}
		}
		if len(emails) > MaxBatchEmails {
			return invalid("payload.emails", fmt.Sprintf("%d emails, over the limit of %d", len(emails), MaxBatchEmails))
		}
		for i, e := range objects {
			if err := checkEmail(e, fmt.Sprintf("payload.emails[%d].", i), true); err != nil {
				return err
			}
		}
	case KindBroadcast:
		if !nonEmptyString(body.get("from")) {
			return invalid("payload.from", "a broadcast needs a sender")
		}
		if !nonEmptyString(body.get("subject")) {
			return invalid("payload.subject", "a broadcast needs a subject")
		}
		if !nonEmptyString(body.get("html")) && !nonEmptyString(body.get("text")) {
			return invalid("payload.html", `a broadcast needs content: "html" or "text"`)
		}
		if ids, ok := jsonStrings(body.get("audienceIds")); !nonEmptyString(body.get("audienceId")) && (!ok || len(ids) == 0) {
			return invalid("payload.audienceId", `a broadcast needs "audienceId" or a non-empty "audienceIds"`)
		}
	}
	return nil
}

func (in *Intent) kind() Kind {
	if in.Kind == "" {
		return KindEmail
	}
	return in.Kind
}

// shorten cuts s to 60 bytes for an error message.
func shorten(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func invalid(field, reason string) error {
	return &InvalidError{Index: -1, Field: field, Reason: reason}
}

func checkEmail(body jsonObject, prefix string, needsContent bool) error {
	if !nonEmptyString(body.get("from")) {
		return invalid(prefix+"from", "needs a sender address")
	}
	for _, field := range []string{"to", "cc", "bcc"} {
		raw := body.get(field)
		if raw == nil || bytes.Equal(raw, []byte("null")) {
			if field == "to" {
				return invalid(prefix+"to", "needs at least one recipient")
			}
			continue
		}
		// The recipients are read in place: a string's text is decoded
		// only for a message, or when it has escapes.
		n, isStrings := stringElements(raw)
		switch {
		case raw[0] == '"':
			if len(raw) == 2 {
				return invalid(prefix+field, "is empty")
			}
			if why := addressProblem(raw); why != "" {
				return invalid(prefix+field, why)
			}
		case isStrings:
			if n == 0 && field == "to" {
				return invalid(prefix+"to", "needs at least one recipient")
			}
			// An element null is "", as json.Unmarshal into a []string
			// gives it; a string with escapes is never empty.
			for e, i := jsonElement(raw, 0); e != nil; e, i = jsonElement(raw, i) {
				if len(e) == 2 || string(e) == "null" {
					return invalid(prefix+field, "must hold only non-empty address strings")
				}
			}
			n := 0
			for e, i := jsonElement(raw, 0); e != nil; e, i = jsonElement(raw, i) {
				if why := addressProblem(e); why != "" {
					return invalid(fmt.Sprintf("%s%s[%d]", prefix, field, n), why)
				}
				n++
			}
		default:
			return invalid(prefix+field, "must be an address string or an array of them")
		}
	}
	if needsContent && !nonEmptyString(body.get("html")) && !nonEmptyString(body.get("text")) {
		return invalid(prefix+"html", `needs content: "html" or "text"`)
	}
	return nil
}

// addressProblem says why a recipient (raw, a JSON string) is in a
// spelling the suppression list cannot match (see internal/base/suppress),
// or returns "": the API would send to such a spelling even when its
// address is suppressed. A recipient without escapes is checked as the
// bytes between its quotes, which costs no copy (when it is at most 32
// bytes, the Go compiler's buffer for a string that does not escape).
func addressProblem(raw json.RawMessage) string {
	if bytes.IndexByte(raw, '\\') < 0 && suppress.Taken(string(raw[1:len(raw)-1])) {
		return ""
	}
	a, _ := jsonString(raw)
	if suppress.Address(a) == "" {
		return fmt.Sprintf("%q %s", shorten(a), suppress.Why(a))
	}
	return ""
}

// jsonType names the type of a valid JSON text, for messages.
func jsonType(raw json.RawMessage) string {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "empty"
	case t[0] == '[':
		return "an array"
	case t[0] == '"':
		return "a string"
	case t[0] == 'n':
		return "null"
	case t[0] == 't' || t[0] == 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// nonEmptyString says whether raw, a value of a decoded payload, is a
// string other than "".
func nonEmptyString(raw json.RawMessage) bool {
	// Every escape stands for a character, so a string is empty when its
	// text is "" alone.
	return len(raw) > 2 && raw[0] == '"'
}

// jsonString returns the string that raw, one value of a JSON text already
// checked whole (a value json.Unmarshal gave a json.RawMessage), holds, and
// whether it is a string. A string with no escape is its bytes between the
// quotes; only one with escapes is decoded, which costs a check and a
// decode of its own (most fields of an email have none).
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}
