// Package demo is what `sendonce demo` runs: a short, real story that shows
// a newcomer what sendonce promises and watches it keep the promise.
//
// Nothing in it is simulated. The demo runs an invoice batch the way an
// application would, each invoice in one transaction with the email that
// announces it; some transactions roll back. A separate worker process sends
// the emails through the OpenEmail client to a fake OpenEmail API running in
// the demo's own process, and the demo kills that worker with SIGKILL at the
// worst moment it can find: while the API has already delivered some emails
// but the worker has not yet written "sent" down. A second worker finishes
// the run, River's rescuer hands it the interrupted jobs, and the API replays
// them from their idempotency keys instead of sending them again. Then one
// customer's email bounces: the API's signed webhook puts the address on the
// suppression list, and the next email to it is parked without an API call.
// The report at the end counts the deliveries in the fake API's ledger, so a
// duplicate would show; Run returns an error when any promise is broken.
//
// # The steps
//
//  1. A database: a throwaway PostgreSQL cluster started from the machine's
//     server binaries (package pgcluster), or the one in Options.DatabaseURL.
//     Either way it is migrated (package migrations).
//  2. The fake OpenEmail API (package fakeapi) on a loopback port, told to
//     answer about one send in eight only a second after delivering it
//     (the latency_after fault): the window the kill aims at. It POSTs a
//     signed webhook for every email it delivers to the workers'
//     --webhook-addr (a free loopback port), signed with a secret made at
//     random for the run and handed to the workers in
//     OPENEMAIL_WEBHOOK_SECRET; it is never printed.
//  3. The invoice run: a table demo_invoices and, per invoice, one
//     transaction that inserts the invoice and enqueues its email with
//     outbox.Enqueue under the key "invoice:<invoice id>". One invoice in ten
//     has its card declined and its transaction rolled back, email included.
//     The last committed invoice goes to a customer of its own,
//     charles@example.org, whose mailbox "does not exist": the fake's
//     bounce rule matches that address and no other. Then the
//     application's books: it defines sendonce_on_status and enables the
//     status hook (the SQL interface of issue 47, as a producer in another
//     language would: the workers are separate processes), so that a
//     "sent" transition of "invoice:<id>" sets that invoice's emailed_at
//     and adds 1 to its emailed_times, in the worker's transaction that
//     records "sent"; other keys and transitions change nothing. Step 3
//     shows the SQL (store.DemoOnStatusFunction).
//  4. Worker 1 (`sendonce work`, a real process) starts sending; a progress
//     bar follows the outbox. Once a third of the emails are sent and some
//     send sits in the window, worker 1 gets SIGKILL. Worker 2 starts at once,
//     and takes the webhooks on the same address (events in between are
//     retried by the fake a few times, then given up: no one listens).
//  5. When every committed intent is sent, the bounce: the demo awaits
//     (polling, with a deadline) the bounced invoice's delivery status
//     "bounced" and its address on sendonce_suppression, then enqueues a
//     payment reminder to it ("reminder:<invoice id>") and awaits it parked
//     as "suppressed", checking that the fake API never saw its key. Then
//     the last worker gets SIGTERM.
//  6. The report: invoices committed and rolled back, intents sent and
//     replayed, emailed_at set once for every invoice sent (the replayed
//     ones counted; none set twice, none for an email not sent),
//     deliveries and duplicates at the API, the bounce and the suppressed
//     reminder.
//  7. Cleanup, always, also on errors and on cancellation of the context:
//     workers stopped, the fake closed, the throwaway cluster removed. On a
//     database of your own only the status hook is disabled and its
//     function dropped, then the demo's table, and the bounced address is
//     taken off the suppression list; its outbox rows (and stored webhook
//     events) stay for you to inspect.
//
// # Running it on your own database
//
//	DATABASE_URL=postgres://me@localhost/mydb sendonce demo
//
// The demo migrates the database, creates and finally drops the table
// demo_invoices and its status hook (the function sendonce_on_status,
// marked as the demo's by a comment), and leaves its intents in
// sendonce_outbox (their keys start "invoice:inv_" or "reminder:inv_" and a
// tag of the run) and the webhook events in sendonce_event. A
// sendonce_on_status of your own is never replaced or dropped: the demo
// then skips its hook, says so, and runs the rest. While the demo runs, its
// function is called for your workers' transitions too, and changes
// nothing for them; one left by a demo killed before its cleanup is
// removed by the next run. The bouncing address, charles@example.org, is
// the demo's own: it is taken off the suppression list before the workers
// start (an entry left by a demo killed before its cleanup would park that
// invoice's email) and again at cleanup. While the demo runs, your own
// workers would not mail that address either. Its jobs go to a River queue of their
// own, sendonce_demo, so its workers never send your application's intents to
// the fake API. Two things it cannot fence off, so do not run it against
// production: a worker also gives River jobs to intents inserted by plain SQL
// (the sweeper), which is why the demo refuses to start while any such intent
// is waiting; and River's maintenance (the rescuer that reclaims a killed
// worker's jobs) runs on whichever River client leads the database, so when
// workers of yours are running, the demo's recovery waits on their
// --rescue-after.
//
// # Timing
//
// A killed worker's jobs look "running" to River until its rescuer
// reclaims them after --rescue-after (4 s here, minutes in production), and
// only on River's leader. The demo does not wait for that: the killed
// worker's lease (the demo's workers run with --lease 1s) lapses without its
// heartbeat, and worker 2's sweeper hands the intents claimed under it to
// new jobs, which replay them (docs/guarantee.md, "A crash replays"); on
// a database server that started moments before (the throwaway one) it
// waits out the restart grace (5 s from the server's start) first. The
// whole demo takes about ten seconds; the bounce step adds well under one.
// With --keep (Options.Keep) a throwaway cluster stays up after the report
// until Ctrl-C, for the commands the report names.
package demo
