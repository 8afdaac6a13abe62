// Package outbox writes and reads sendonce's send intents: emails, batches,
// template sends and broadcasts waiting to be sent through the OpenEmail API.
//
// An application enqueues an intent in the same transaction as the business
// data that causes it, so the invoice row and its email commit or roll back
// together. [Outbox.Enqueue] inserts the intent's row into sendonce_outbox,
// in one statement in that transaction, and nothing else: no River job per
// intent. The drains of River workers (package worker) claim due intents in
// batches and send them after commit, exactly once as far as the recipient can tell. The
// database must be migrated first (migrations.Up, or `sendonce migrate`);
// on one that is not, Enqueue fails with an error matching
// migrations.ErrPending:
//
//	tx, err := pool.Begin(ctx)
//	if err != nil { ... }
//	defer tx.Rollback(ctx)
//	if _, err := tx.Exec(ctx, `INSERT INTO invoices (id, customer) VALUES ($1, $2)`, "inv_4192", "ada@example.com"); err != nil { ... }
//	_, err = ob.Enqueue(ctx, tx, outbox.Intent{
//		Key:     "invoice:inv_4192", // from the cause of the send, never a clock
//		Payload: json.RawMessage(`{"from":"billing@example.com","to":["ada@example.com"],"subject":"Your invoice","text":"…"}`),
//	})
//	if err != nil { ... }
//	return tx.Commit(ctx)
//
// # Idempotency keys
//
// The key is what the OpenEmail API deduplicates on: it claims the key
// before it delivers, so a send retried after a crash is replayed, never
// repeated. Keys follow the API's rule (1 to 255 characters of letters,
// digits, "_", ".", ":" and "-"). Derive the key from the cause of the
// send, never from a clock: Enqueue refuses an empty key, and a key holding
// a clock reading (an RFC 3339 time with a fraction of a second; see
// ClockPattern). RandomKey gives a random key for a send that has no cause
// to name it by; it guards only that intent's own retries. Enqueueing a key that is
// already there with the same kind, template and payload returns the
// existing intent (Existing) and inserts no second job; with a different
// payload it fails with a *KeyReuseError, the mirror of the API's 422
// idempotency_key_reuse, before any network call. Invalid intents fail with
// an *InvalidError naming the field, and nothing is written: the caller's
// transaction stays usable. A recipient must be spelled local@domain or
// Display Name <local@domain>, the forms the suppression list matches
// (internal/base/suppress has the rule); the API's other spellings of an
// address (comments, quoted local parts, tabs, groups) are refused, since
// a suppressed address spelled so would be mailed.
//
// # Isolation levels
//
// Enqueue in a READ COMMITTED transaction (PostgreSQL's default) as you
// please. A REPEATABLE READ or SERIALIZABLE transaction reads one snapshot
// throughout, and cannot see an intent enqueued, or a key pruned (see
// Record.PrunedAt), by a transaction that committed after it began: an
// enqueue of such a key fails with a serialization failure (SQLSTATE
// 40001) that aborts the transaction, and the transaction is retried, as
// such transactions are for PostgreSQL's own conflicts. The retry's
// snapshot sees the key, and the enqueue answers as ever.
//
// # Producers in other languages
//
// A plain INSERT INTO sendonce_outbox (idempotency_key, kind, payload, ...)
// works too: a trigger validates the row with the same rules (and refuses a
// bad one with a message naming the problem) and notifies the workers, whose
// sweeper gives the row a River job within about a second.
//
// # States
//
// pending → sending → sent, or failed (see LastError), or canceled (Cancel,
// only before any attempt), or suppressed (every recipient on the
// suppression list when a worker first claimed it; no API call was made:
// see Suppress). An intent is uncertain once an attempt's
// outcome is unknown (a network error, a 5xx, a crash): the API may hold a
// delivery under its key. Retry puts a failed (or suppressed) intent back to pending with
// the same key, refusing an uncertain one past its replay window unless
// forced. Package worker moves intents through the states; Get, List and
// Stats read them.
package outbox
