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
// them from their idempotency keys instead of sending them again. The report
// at the end counts the deliveries in the fake API's ledger, so a duplicate
// would show; Run returns an error when any promise is broken.
//
// # The steps
//
//  1. A database: a throwaway PostgreSQL cluster started from the machine's
//     server binaries (package pgcluster), or the one in Options.DatabaseURL.
//     Either way it is migrated (package migrations).
//  2. The fake OpenEmail API (package fakeapi) on a loopback port, told to
//     answer about one send in eight only a second after delivering it
//     (the latency_after fault): the window the kill aims at.
//  3. The invoice run: a table demo_invoices and, per invoice, one
//     transaction that inserts the invoice and enqueues its email with
//     outbox.Enqueue under the key "invoice:<invoice id>". One invoice in ten
//     has its card declined and its transaction rolled back, email included.
//  4. Worker 1 (`sendonce work`, a real process) starts sending; a progress
//     bar follows the outbox. Once a third of the emails are sent and some
//     send sits in the window, worker 1 gets SIGKILL. Worker 2 starts at once.
//  5. When every committed intent is sent, worker 2 gets SIGTERM and the
//     report is printed: invoices committed and rolled back, intents sent and
//     replayed, deliveries and duplicates at the API.
//  6. Cleanup, always, also on errors and on cancellation of the context:
//     workers stopped, the fake closed, the throwaway cluster removed. On a
//     database of your own only the demo's table is dropped; its outbox rows
//     stay for you to inspect.
//
// # Running it on your own database
//
//	DATABASE_URL=postgres://me@localhost/mydb sendonce demo
//
// The demo migrates the database, creates and finally drops the table
// demo_invoices, and leaves its intents in sendonce_outbox (their keys start
// "invoice:inv_" and a tag of the run). Its jobs go to a River queue of their
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
// A killed worker's jobs look "running" to River until the rescuer reclaims
// them. The demo's workers run with --job-timeout 3s and --rescue-after 4s
// (in production these are minutes), but the rescuer runs only on River's
// leader, and the killed worker was the leader: its lease has to lapse
// (up to 15 s) before worker 2 takes over. The whole demo takes about half a
// minute.
package demo
