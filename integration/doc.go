// Package integration is sendonce's end-to-end proof: it builds the
// sendonce command, runs it as real processes against a real PostgreSQL
// server and the fake OpenEmail API (package fakeapi, in the test process),
// and checks what happened against the fake's delivery ledger, the only
// witness that counts: every intent delivered, none twice.
//
// The package holds tests only; this file is its README.
//
// # Running it
//
//	go test -race -count=1 ./integration/            # about 6 minutes on 2 cores (TestSystem: about a minute)
//	go test -race -count=1 ./integration/ -v         # with every step logged
//	go test ./integration/ -run TestFaults -seed 42  # one scenario, one seed
//	SENDONCE_SOAK=1 go test -timeout 60m ./integration/   # a longer soak
//
// It needs the PostgreSQL server binaries (initdb, pg_ctl: on PATH or under
// /usr/lib/postgresql/*/bin). The scenarios that leave the server running
// use TEST_DATABASE_URL (or DATABASE_URL) when set, as `make test` does, and
// otherwise a throwaway cluster of their own; each makes a database of its
// own there and migrates it with `sendonce migrate`. The scenario that
// crashes PostgreSQL always starts a cluster of its own. `go test -short`
// skips the package.
//
// The command is built once per run with `go build ./cmd/sendonce`, without
// the race detector (that is for the test binary; the command runs as it
// ships). The suite reads every source file of the module, so go test's
// cache reruns it whenever any of them changes, the command's included.
//
// # Seeds, sizes and slack
//
// Every random choice (kill instants, which worker dies, the mix of intent
// kinds, the fake's probabilistic faults) comes from one seed, printed at
// the start and in every summary line. Repeat a run with
//
//	go test ./integration/ -seed N      or      SENDONCE_SEED=N go test ./integration/
//
// A soak multiplies intents, kills and crashes: -soak or SENDONCE_SOAK=1
// multiplies by 10, SENDONCE_SOAK=N by N. Give it a longer -timeout.
//
// Waits the retry contract names are checked from the fake's request log,
// lower bounds exactly, upper bounds with a scheduling slack of 400 ms
// (-slack or SENDONCE_SLACK).
//
// # The scenarios
//
// One file each. Three of them (crash replay, database restart, many
// workers) run five times, as subtests: "single", every intent sent alone;
// "poll-only", sent alone by workers run with --poll-only (no LISTEN: River
// and the sweeper poll; the crash replay checks that no session LISTENs);
// "pgbouncer-transaction" and "pgbouncer-session", sent alone with every
// connection of the producers and workers through a PgBouncer of the
// test's own in that pool mode (SENDONCE_POOLER tells the processes; a
// process printing a prepared-statement error fails the run; the rescue
// time scenario runs directly and through both too; pooler_test.go);
// and "coalesce", the workers run with --coalesce 100
// (and a concurrency of 50,
// since each member job holds a slot while its batch gathers), so email
// intents go out in batch requests (POST /emails/batch) under batch keys
// (sendonce-batch:…). Besides exactly-once delivery, a coalescing run must
// show batch requests in the fake's log, and every batch the API replayed
// must have been replayed whole: each of its members recorded sent and
// replayed (coalesce_test.go).
//
//   - crash_replay_test.go: two workers drain 200 intents (emails, batches,
//     template sends and broadcasts; enqueued by `sendonce enqueue`, plain
//     SQL and the Go API) while the fake holds each answer back after
//     delivering (latency_after). Four times, on reaching a random number of
//     deliveries with an answer still pending, a worker gets SIGKILL and is
//     restarted. The sweeper puts the rows a killed worker left sending
//     back on the drain once its lease ends (and River's rescuer reruns a
//     killed batch job); every send whose answer a kill cut off must
//     come back as a replay (outbox replayed = true), and the ledger must
//     show each recipient exactly once. Coalescing, a kill waits for a
//     batch's answer to be pending and kills the worker sending it (by
//     River's attempted_by); a cut-off batch's members must all be
//     replayed, and at least one batch must have been replayed whole.
//   - many_workers_test.go: three workers on one outbox; every intent sent
//     once, each claimed once, one River job each (and one per frozen
//     batch), and each worker did some of the work (by River's attempted_by
//     and by each process's own logs, a "batch sent" line counting its
//     members).
//   - faults_test.go: intents grouped by recipient meet dropped connections
//     and 5xx after delivery, 5xx and timeouts before it, Retry-After in
//     seconds and as an HTTP-date (429 and 503), a 429 without Retry-After,
//     retries spent, and random faults. Besides exactly-once delivery, the
//     request log must show the same key on every attempt, backoff retry n
//     after [cap/2, cap] with cap = min(0.5s·2^(n-1), 8s), Retry-After
//     honoured exactly, no retry within the call after a bare 429 (the next
//     request comes after the fleet's budget gives a token, or from the
//     snoozed job after the intent's own backoff), and an outbox attempt
//     count that matches the River-level retries seen.
//   - rate_trouble_test.go (issue 23): 1,000 intents beside 2 the fake
//     refuses with 429 forever drain in at most 1.5× the time without them,
//     and the two stay pending; three workers with no --api-rate against
//     an API at 20/s (1,500 intents) use at least 90% of the budget with at
//     most 3% of requests refused, none of the first second's; SIGTERM
//     while 500 sends wait for the budget exits 0 within --shutdown-grace
//     with no attempt spent (outbox, River, the fake's log).
//   - tenants_test.go (issue 46): three workers at --api-rate 20/s against
//     an API at 20/s drain the runs of tenants a (10,000), b and c (1,000
//     each) and q (300, a daily quota of 100) while a transactional intent
//     of tenant d is committed every half second. In 10 s windows of the
//     fake's delivery times, a, b and c each have a third (± 5 points) of
//     the three's deliveries at weights 1:1:1, and a half with a at weight
//     2; d's intents are delivered within 1 s of their commit (p99 of 50);
//     q stops at exactly 100 sends, the rest unattempted, while the others
//     go on.
//   - db_restart_test.go: PostgreSQL (durable: fsync on) is stopped with
//     `pg_ctl stop -m immediate` twice while two workers drain, and started
//     again on its port. The same processes must reconnect by themselves,
//     finish, and send intents enqueued afterwards by SQL and by Go.
//   - retention_test.go: 20,000 email intents sent, then `sendonce prune
//     --retain 0` while producers enqueue half of the keys again with the
//     same payload (Go API and plain SQL) and 100 with another: no new
//     delivery, 100 key-reuse errors, no row left; the sizes after VACUUM
//     (outbox and tombstones) are logged.
//   - bad_input_test.go: 38 kinds of bad input through `sendonce enqueue`
//     and 26 through plain SQL inserts, each refused with a message naming
//     the problem (one line on stderr for the command), and the outbox,
//     River's jobs, the fake's ledger and its request log unchanged.
//   - system_test.go (with system_ops_test.go, system_faults_test.go,
//     system_hooks_test.go, system_races_test.go, system_model_test.go,
//     system_events_test.go and system_status_test.go): the seeded, randomized whole-system test. Per
//     seed (math/rand/v2; every choice from it): a PostgreSQL cluster of its
//     own, the fake API with a 6 s key memory (shorter than the 8 s
//     retention its prunes use, as the API's 24 h against 30 days; the
//     workers' --replay-window is 5 s) and 2–3 workers of mixed flags
//     (--coalesce 20 or off, --poll-only, --retain, --partly-suppressed
//     park, each with --webhook-addr behind a proxy that skips dead ones).
//     A schedule of operations, each logged with a sequence number and its
//     times: enqueues by Go (Enqueue, EnqueueMany; READ COMMITTED,
//     REPEATABLE READ, SERIALIZABLE; some rolled back), plain SQL and
//     `sendonce enqueue`, of all four kinds, to a pool of six addresses in
//     the forms sendonce takes ("Ada <ada@x>", "<ada@x>", a quoted name,
//     upper case, spaces around) and, one time in twelve, in ones it
//     refuses at enqueue ("ada@x (Ada)", "\"ada\"@x", a leading tab; hole
//     3); re-enqueues with the same body and with another, one
//     in an RR/SERIALIZABLE transaction whose snapshot predates the prune
//     that removes its key; runs (create, add members by Go, plain SQL or
//     `sendonce enqueue --run`, pause, resume, cancel, reschedule); cancels and retries (Go and CLI);
//     suppression adds and removes (Go and CLI); prunes; signed webhook
//     events of its own, posted through the proxy as the fake's are: hard
//     and soft bounces and complaints of delivered messages (one email of a
//     batch-kind intent too), suppression.added and .removed, a stored
//     event posted again byte for byte under another X-OpenEmail-Delivery
//     header or none, and two events of one address posted against the
//     order of their own times (a bounce, then an older
//     suppression.removed, or the other way round); and operations aimed
//     at an instant by polling the database (system_races_test.go): a
//     recipient of a coalesced batch suppressed just after the batch is
//     frozen, a run canceled while a batch of it is being frozen, a
//     plain-SQL member inserted into a run just canceled. Each enqueue, run
//     and schedule (saved and removed as it goes) names one of the seed's
//     0–4 tenants or none, whose weights, rates and daily quotas change by
//     plain SQL while the workers run, and two tenants race a large run
//     each (system_tenants_test.go). Faults among them:
//     SIGKILL (and restart) of a worker, a worker stopped (SIGSTOP) past its
//     lease and continued, once a seed while the database refuses to hand
//     its intents on (pause-unrescued), `pg_ctl stop -m immediate` and
//     start, and episodes of the fake's rules: lost answers, slow answers,
//     5xx, 429 with and without Retry-After, a 400/422 on the retry of an
//     attempt whose answer was lost (single sends and batches), and
//     bounces and complaints among the fake's own events, some posted
//     twice, late, out of order or signed wrong. Then it
//     quiesces (faults and rates lifted, schedules removed, workers up,
//     paused runs resumed, polling the outbox with a deadline) and checks the fake's ledger against a model
//     of what each operation's answer proved: no (recipient, cause)
//     delivered twice (a delivery's cause is the key its subject names, so
//     a batch split into new keys still counts), every committed intent
//     delivered once unless canceled, suppressed or failed for a fault,
//     nothing rolled back or refused delivered, nothing delivered to an
//     address whose suppression (by hand or by an event) was in force
//     before the intent's first claim (first_attempt_at), nothing of a run
//     canceled before its first attempt and no member added after its
//     cancel, run counts equal to the members' rows, nothing stranded but
//     what a tenant's exhausted daily quota holds, each row's state
//     agreeing with the ledger; each row of the tenant its enqueue, run or
//     schedule gave it, a member naming another tenant than its run's
//     refused; a tenant's daily quota and rate held by the claims and
//     requests made while they were set, and the racing tenants' claims
//     shared by weight while both were backlogged;
//     the suppression list what its changes make of it in the order of
//     their own times (an event's createdAt, a change by hand's call; the
//     latest wins, an addition at a tie), each event applied once per
//     signed id (a post of an event stored before is answered duplicate),
//     and each sent intent's delivery status the highest of its messages'
//     events (every message of a batch-kind intent); and an application's
//     own table (app_status_log), which every seed's database keeps through
//     the SQL status hook (its sendonce_on_status appends each transition;
//     enabled before the first worker starts), equal to the committed
//     transitions (rule 17, system_status_test.go): no missing (each final
//     state sent, failed, suppressed or canceled, and each final delivery
//     status delivered, bounced or complained, is its key's last of its
//     kind in the log; a delivered intent settled but not failed has a sent;
//     each retry answered follows a failed or suppressed of its own), none
//     repeated (equal state transitions in a row only with a retry
//     answered between them; equal delivery transitions in a row only
//     bounced, with a failed or suppressed event of its messages), none
//     uncommitted (nothing after sent or canceled; after failed only a late
//     sent or what follows a retry; a sent only of a key the API delivered,
//     a canceled only of one it never delivered and after a cancel of it
//     or its run began, a suppressed only of one with a recipient ever
//     suppressed; a delivery transition only after a sent, to a status an
//     event of its messages gives, never to a lower rank). Every post to a
//     worker is recorded by the proxy with its answer: a 2xx stored the
//     event, a 500 or a lost connection may have. An operation whose answer
//     was lost (a commit cut by a restart) is uncertain, and only then is
//     the database's final state taken as its result. A violation prints
//     the seed, the rule, the operations on its keys and addresses with
//     their times, and the command that replays the seed; the schedule and
//     every worker's log are kept under $TMPDIR/sendonce-system-SEED.
//     Flags (env twins): -system.seeds 1,2 or 5x (SENDONCE_SYSTEM_SEEDS;
//     default 1,2, about a minute), -system.ops 15s per seed
//     (SENDONCE_SYSTEM_OPS), -system.budget 20m to run seeds one after
//     another until spent (SENDONCE_SYSTEM_BUDGET; `make soak`). One line
//     per seed (tenants, operations and faults by kind, the rows' final
//     states, the intents a quota holds, deliveries, requests, webhook
//     events, violations) and a total line.
//   - secrets_test.go: runs the command where a key could leak (401s,
//     malformed and missing keys, plain http off the machine, debug logs,
//     stored errors, every inspect command) and then scans everything every
//     process of the run printed and every row every scenario stored for the
//     API key. TestMain scans again after the last test.
//
// The harness is in main_test.go (flags, build, summaries), cluster_test.go
// (databases and their dumps), processes_test.go (process groups, output
// capture, worker flags), fake_test.go (the fake API and the key) and
// checks_test.go (intents, polling, ledger checks). The ledger check holds
// each delivery to the key its intent's row names: its own, or the batch
// key in sendonce_outbox.batch_key, and a batch key's deliveries to exactly
// its members' recipients.
//
// # What it prints
//
// Each scenario ends with one summary line, such as
//
//	crash-replay: seed=123 intents=200 kills=4 restarts=4 interrupted=31 deliveries=223 duplicates=0 lost=0 replayed=31 elapsed=28s
//	crash-replay/coalesce: seed=123 intents=200 coalesce=100 concurrency=50 kills=4 kills_on_pending_batch=2 restarts=4 interrupted=172 deliveries=215 duplicates=0 lost=0 replayed=172 batches=4 batch_requests=8 coalesced=147 replayed_batches=4 requests=86 elapsed=19s
//
// (a coalescing line also counts batch keys sent, POST /emails/batch
// requests, intents sent in a batch, and batches replayed whole).
//
// go test hides a passing package's output unless -v is given, so the
// lines are printed after the last test: to stdout with -v or on failure,
// and otherwise to the stderr of the go command running the test binary,
// which puts them in the plain `go test ./...` output too.
//
// Nothing is synchronised by sleeping: the suite waits for events (a number
// of deliveries, answers still pending, outbox states, a River client's
// start) with deadlines. The one sleep is a database outage's length.
// Worker processes run in process groups of their own and are killed, group
// and all, when their test ends.
package integration
