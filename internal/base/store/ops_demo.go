package store

import "context"

// The reads of `sendonce demo` (cmd/internal/ops/demo) on sendonce_* and
// river_* tables: the operator's and the report's side of the run, scoped
// to the run's keys (they start with a prefix of the run's own). The
// demo's application side writes its intents through package outbox, and
// its own table (demo_invoices) is not sendonce's; the statements of its
// status hook, below, name sendonce_* objects, and so live here.

// DemoCounts are a demo run's intents by outcome.
type DemoCounts struct {
	Sent     int // state sent
	Settled  int // sent, failed, canceled or suppressed: no worker will touch it again
	Sending  int // claimed by a worker (or left so by a dead one)
	Replayed int // sent, and the API's answer was a replay
}

// demoCountsSQL counts the intents whose keys start with $1 by outcome.
const demoCountsSQL = `SELECT
			count(*) FILTER (WHERE state = 'sent'),
			count(*) FILTER (WHERE state IN ('sent', 'failed', 'canceled', 'suppressed')),
			count(*) FILTER (WHERE state = 'sending'),
			count(*) FILTER (WHERE replayed)
		FROM sendonce_outbox WHERE starts_with(idempotency_key, $1)`

// DemoReadCounts counts the intents whose keys start with keyPrefix by
// outcome. The error is the statement's, unwrapped.
func DemoReadCounts(ctx context.Context, db DB, keyPrefix string) (DemoCounts, error) {
	var c DemoCounts
	err := db.QueryRow(ctx, demoCountsSQL, keyPrefix).Scan(&c.Sent, &c.Settled, &c.Sending, &c.Replayed)
	return c, err
}

// demoIntentsSQL counts the intents whose keys start with $1.
const demoIntentsSQL = `SELECT count(*) FROM sendonce_outbox WHERE starts_with(idempotency_key, $1)`

// DemoCountIntents counts the intents whose keys start with keyPrefix.
// The error is the statement's, unwrapped.
func DemoCountIntents(ctx context.Context, db DB, keyPrefix string) (int, error) {
	var n int
	err := db.QueryRow(ctx, demoIntentsSQL, keyPrefix).Scan(&n)
	return n, err
}

// demoBouncedSQL counts the intents whose keys start with $1 and whose
// delivery status is bounced.
const demoBouncedSQL = `SELECT count(*) FROM sendonce_outbox
		WHERE starts_with(idempotency_key, $1) AND delivery_status = 'bounced'`

// DemoCountBounced counts the intents whose keys start with keyPrefix that
// bounced. The error is the statement's, unwrapped.
func DemoCountBounced(ctx context.Context, db DB, keyPrefix string) (int, error) {
	var n int
	err := db.QueryRow(ctx, demoBouncedSQL, keyPrefix).Scan(&n)
	return n, err
}

// demoWaitingSQL counts the pending intents with no River job of their
// own on queue $1: those the drains of that queue's workers would claim.
const demoWaitingSQL = `SELECT count(*) FROM sendonce_outbox WHERE job_id IS NULL AND state = 'pending' AND queue = $1`

// DemoCountWaiting counts the pending intents with no River job of their
// own on queue, which its workers' drains would claim. The error is the
// statement's, unwrapped.
func DemoCountWaiting(ctx context.Context, db DB, queue string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, demoWaitingSQL, queue).Scan(&n)
	return n, err
}

// demoRiverLeadersSQL counts River's leaders whose term has not expired.
const demoRiverLeadersSQL = `SELECT count(*) FROM river_leader WHERE expires_at > now()`

// DemoCountRiverLeaders counts the River leaders of the database whose term
// has not expired: another River client leads it. The error is the
// statement's, unwrapped.
func DemoCountRiverLeaders(ctx context.Context, db DB) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, demoRiverLeadersSQL).Scan(&n)
	return n, err
}

// demoUnsentSQL reads which of the keys $1 are intents not marked sent, in
// the order they were enqueued.
const demoUnsentSQL = `SELECT idempotency_key FROM sendonce_outbox
		WHERE idempotency_key = ANY($1) AND state <> 'sent' ORDER BY id`

// DemoUnsent returns those of keys whose intents are not marked sent, in
// the order they were enqueued. The error is the statement's, unwrapped.
func DemoUnsent(ctx context.Context, db DB, keys []string) ([]string, error) {
	rows, err := db.Query(ctx, demoUnsentSQL, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// demoSuppressedSQL says whether an address is on the suppression list.
const demoSuppressedSQL = `SELECT EXISTS (SELECT FROM sendonce_suppression WHERE address = lower($1))`

// DemoSuppressed reports whether addr is on the suppression list. The
// error is the statement's, unwrapped.
func DemoSuppressed(ctx context.Context, db DB, addr string) (bool, error) {
	var on bool
	err := db.QueryRow(ctx, demoSuppressedSQL, addr).Scan(&on)
	return on, err
}

// The demo's application keeps demo_invoices.emailed_at through the status
// hook (issue 47): the SQL interface of migration 00032, as a producer in
// another language would use it. The function's text names sendonce_status,
// and enabling and disabling the hook call sendonce_* functions, so they
// live here too.

// DemoOnStatusFunction is the demo application's status hook: a "sent"
// transition of the key invoice:<id> sets that invoice's emailed_at and
// counts it in emailed_times; other keys and transitions change nothing
// (on a database of your own, your workers' transitions call it too). The
// demo shows it to the reader as it runs it.
const DemoOnStatusFunction = `CREATE FUNCTION sendonce_on_status(s sendonce_status) RETURNS void LANGUAGE sql AS $$
  UPDATE demo_invoices SET emailed_at = now(), emailed_times = emailed_times + 1
  WHERE s.transition = 'sent' AND id = substr(s.idempotency_key, length('invoice:') + 1)
    AND starts_with(s.idempotency_key, 'invoice:')
$$`

// DemoStatusHookEnable turns the status hook on, once the function exists.
const DemoStatusHookEnable = `SELECT sendonce_status_hook_enable()`

// demoStatusHookMark is the comment on the demo's function, by which the
// demo tells its own (left by a run killed before its cleanup) from one of
// your application's, which it never replaces or drops.
const demoStatusHookMark = "sendonce demo: sets demo_invoices.emailed_at; dropped when the demo ends"

// demoStatusHookMarkSQL puts demoStatusHookMark on the demo's function.
const demoStatusHookMarkSQL = `COMMENT ON FUNCTION sendonce_on_status(sendonce_status) IS '` + demoStatusHookMark + `'`

// DemoEnableStatusHook creates the demo's sendonce_on_status
// (DemoOnStatusFunction), marks it as the demo's, and enables the hook.
// Run it in a transaction, after demo_invoices exists. The error is the
// statement's, unwrapped.
func DemoEnableStatusHook(ctx context.Context, db DB) error {
	for _, sql := range []string{DemoOnStatusFunction, demoStatusHookMarkSQL, DemoStatusHookEnable} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// demoStatusHookOwnerSQL says whether a sendonce_on_status(sendonce_status)
// exists, and whether it carries the demo's mark ($1).
const demoStatusHookOwnerSQL = `SELECT p IS NOT NULL, coalesce(obj_description(p, 'pg_proc') = $1, false)
		FROM (SELECT to_regprocedure('sendonce_on_status(sendonce_status)') AS p) f`

// DemoStatusHookOwner reports whether the database has a function
// sendonce_on_status(sendonce_status), and whether it is the demo's own.
// The error is the statement's, unwrapped.
func DemoStatusHookOwner(ctx context.Context, db DB) (exists, demos bool, err error) {
	err = db.QueryRow(ctx, demoStatusHookOwnerSQL, demoStatusHookMark).Scan(&exists, &demos)
	return exists, demos, err
}

// demoStatusHookDropSQL disables the hook and drops the function.
const demoStatusHookDropSQL = `SELECT sendonce_status_hook_disable();
DROP FUNCTION IF EXISTS sendonce_on_status(sendonce_status)`

// DemoDropStatusHook disables the status hook and drops the demo's
// sendonce_on_status, in one transaction; a function that is not the
// demo's (DemoStatusHookOwner) is left alone, and so is the hook. It
// returns whether it dropped one. The error is the statement's, unwrapped.
func DemoDropStatusHook(ctx context.Context, db DB) (bool, error) {
	exists, demos, err := DemoStatusHookOwner(ctx, db)
	if err != nil || !exists || !demos {
		return false, err
	}
	// Two statements in one string, without arguments: the simple
	// protocol, one implicit transaction.
	if _, err := db.Exec(ctx, demoStatusHookDropSQL); err != nil {
		return false, err
	}
	return true, nil
}

// DemoEmailed is what the demo's status hook wrote for a run's invoice
// intents, read against the outbox.
type DemoEmailed struct {
	Sent     int // intents marked sent
	Replayed int // of Sent, those the API answered with a replay
	// Once: of Sent, those whose invoice has emailed_times = 1 and
	// emailed_at set; OnceReplayed, of Once, the replayed ones.
	Once         int
	OnceReplayed int
	// More: invoices whose emailed_times is above 1. Unsent: invoices
	// with emailed_times above 0 whose intent is not marked sent.
	More   int
	Unsent int
}

// demoEmailedSQL reads DemoEmailed for the invoice intents whose keys
// start with $1, joined with their invoices in demo_invoices.
const demoEmailedSQL = `SELECT
			count(*) FILTER (WHERE o.state = 'sent'),
			count(*) FILTER (WHERE o.state = 'sent' AND o.replayed),
			count(*) FILTER (WHERE o.state = 'sent' AND i.emailed_times = 1 AND i.emailed_at IS NOT NULL),
			count(*) FILTER (WHERE o.state = 'sent' AND o.replayed AND i.emailed_times = 1 AND i.emailed_at IS NOT NULL),
			count(*) FILTER (WHERE i.emailed_times > 1),
			count(*) FILTER (WHERE o.state <> 'sent' AND i.emailed_times > 0)
		FROM sendonce_outbox o LEFT JOIN demo_invoices i ON o.idempotency_key = 'invoice:' || i.id
		WHERE starts_with(o.idempotency_key, $1)`

// DemoReadEmailed reads what the status hook wrote for the invoice intents
// whose keys start with keyPrefix. The error is the statement's, unwrapped.
func DemoReadEmailed(ctx context.Context, db DB, keyPrefix string) (DemoEmailed, error) {
	var e DemoEmailed
	err := db.QueryRow(ctx, demoEmailedSQL, keyPrefix).Scan(&e.Sent, &e.Replayed, &e.Once, &e.OnceReplayed, &e.More, &e.Unsent)
	return e, err
}
