// Package worker drains the sendonce outbox: a River worker that sends one
// intent through the OpenEmail client with the intent's stored idempotency
// key, and records what became of it on the intent's row.
//
// # One intent, one outcome
//
// Each send job claims its intent (pending or sending → sending, one more
// attempt, the first attempt's time stamped), makes the API call with the
// stored payload and key, and maps the outcome:
//
//   - success, fresh or replayed → sent, with the message id and whether
//     the API replayed an earlier delivery;
//   - a permanent API error (400, 401, 403, 404, 409, 422, …) or a payload
//     that cannot become a request → failed with the API's status, code and
//     message, and the job is cancelled (river.JobCancel): no retry;
//   - a rate limit, or a Retry-After the client would not wait (over a
//     minute) → the job is snoozed for exactly the asked time
//     (river.JobSnooze), at most MaxSnoozes times;
//   - a network error or a 5xx after the client's own retries → back to
//     pending and uncertain (the API may have delivered it), and River
//     retries the job with backoff; after MaxAttempts attempts → failed.
//
// # The replay window
//
// The API honours an idempotency key only for a limited time (24 h at the
// email APIs we know). A send attempted again after that could be delivered
// a second time. So no retry or snooze may reach past ReplayWindow (default
// 23 h, at most 24 h) measured from the intent's first attempt on the
// database's clock, and no HTTP attempt goes on past it: an intent that
// would is parked as failed, with a reason that says so, for an operator to
// look at.
//
// # Crashes
//
// A worker killed at any instant loses nothing. Each Worker holds a lease,
// a row of sendonce_worker it renews every second (Config.Lease, 3 s by
// default, past the last renewal by the database's clock), and records the
// lease's epoch with every claim; when the process dies its lease goes
// unrenewed, and once it has passed the fleet's sweeper (the worker of the
// lowest held lease, which runs the per-interval duties for all; when it is
// the one that died, the next takes over once its lease has passed) ends it
// and gives the intents left sending under it a new job, at a sweep timed
// for the lease's end. Every record of an attempt checks the epoch and the lease,
// so a worker paused past its lease records nothing for intents another
// worker took over. That job claims the intent again (still in
// sending, so now uncertain) and sends it with the same key: if the first
// attempt had reached the API, the API replays it, the intent is recorded
// as sent with Replayed true, and the recipient gets one email. River's
// rescuer, minutes later, revives the old job, which is no longer the
// intent's job and does nothing.
//
// Only the job named on the intent's row claims it; the sweeper also gives
// a new job to any intent whose job ended without it (cancelled or deleted
// in the River UI, discarded by another River client), so no intent is
// left where nothing moves it. A send cut off by the worker's own shutdown
// goes back to the queue without counting as an attempt.
//
// A success is written to the row before River completes the job with its
// batching completer. If the process dies between the two, the job runs
// again, finds the intent sent and completes without calling the API: as
// safe as completing the job in the row's transaction (river.JobCompleteTx),
// without a transaction per job on the hot path.
//
// # Batches
//
// With Config.Coalesce, email intents whose jobs run at about the same time
// (one queue and one run at a time) are frozen into a batch before its first
// attempt: a sendonce_batch row with a key of its own, the request body and
// the members in order, and a batch job. The batch job sends that body
// under that key on every attempt, so a crash replays the whole batch, and
// maps the API's answer back to each member. Its first claim, before any
// attempt, takes out the members the suppression list now stops, as a
// single send's first claim does. A request refused whole with a 400 or
// 422 is split to send the rest, unless an earlier attempt may have been
// delivered: an uncertain batch is parked, never split.
//
// The drain's intents, without a River job of their own, are gathered by
// the drain itself: before it claims, it freezes the due email intents
// of its queue into batches by run (sendstate's Batcher.FreezeDue), a full
// batch at once and a partial one once CoalesceWait has passed since its
// oldest came due; its claims hold such an intent that long, and then send
// it alone if nothing joined it.
//
// # Runs and schedules
//
// A run's members are not claimed while it is paused; their jobs go at a
// lower priority than lone intents and wait for the send budget behind them
// (budget WaitBulk). Every sweep of the fleet's sweeper, and of each worker
// with Producers of its own, also creates the runs of due schedules,
// one occurrence per transaction (Config.Producers for Go producers). A
// schedule whose occurrence fails keeps it due, gets the error recorded
// (outbox.Schedule.LastError) and is tried again after a backoff, while the
// other schedules go on.
//
// # Running it
//
// Worker bundles a River client working the send queue with a sweeper that
// gives jobs to rows inserted by plain SQL (the table's trigger notifies it;
// its drain also wakes when the next intent comes due, and looks every 30
// sweeps besides) and to intents left without a working job.
// It is the one way to run the send jobs: they rely on its claim batching,
// its liveness lease and its sweeper.
//
//	w, err := worker.New(pool, nil) // client from OPENEMAIL_API_KEY, OPENEMAIL_BASE_URL
//	if err != nil { ... }
//	if err := w.Start(ctx); err != nil { ... }
//	defer w.Stop(shutdownCtx) // in-flight sends finish, or are cancelled when shutdownCtx ends
//
// New refuses a database with migrations pending (an error matching
// migrations.ErrPending: run migrations.Up or `sendonce migrate`). With no
// Config.Logger the worker logs through slog.Default(), one line per
// outcome.
//
// Config.Retain turns on retention: every minute one worker of the fleet
// deletes the settled intents older than it, each leaving a tombstone of
// its key that keeps enqueueing it again from sending twice (see
// sendstate.Prune). Config.PollOnly makes the worker poll instead of
// LISTENing, for a database behind a transaction-mode pooler.
package worker
