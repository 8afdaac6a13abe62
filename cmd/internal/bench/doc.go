// Package bench measures sendonce against a real, durable PostgreSQL: how
// fast a backlog drains next to raw River and next to what a user would
// write instead (a River job making the same client call, no outbox), how
// close a worker comes to the ideal when the API is slow, how fast
// applications can enqueue next to a plain INSERT, how long an email takes
// from commit to delivery, how much memory the worker process needs, and how much of an API's rate limit a
// fleet of workers turns into sends. `make bench` runs it all through the
// command cmd/internal/cmd/bench and writes the table to BENCHMARKS.md.
//
// # Why it looks the way it does
//
// The figures are meant to be comparable across machines and honest on a
// shared one. So every measurement runs in the same process against the
// same database, one after another, with its baseline measured right
// beside it (raw River and River + client for the drain, a plain INSERT
// for the enqueue, the ideal concurrency ÷ latency and River + client for
// the latency-bound drain), and the ratio is taken run by run. Every
// figure is the median of several runs with its spread (min–max), but for
// the rate-limited drain's: paced by the API's limit, it takes minutes and
// is measured once. Scenario 0 measures the
// machine itself (PostgreSQL's single-row commits per second), because
// almost everything else is bound by commits or by the CPU they share with
// the worker.
//
// Rates alone flatter a path that spends the database's CPU or its disk,
// so the drains also report, for the full path and each baseline, the
// database backends' CPU per intent and the WAL bytes per intent
// (pg_current_wal_lsn before and after), and the full path's ratio to
// River + client in rate and in database CPU: the outbox's goals are at
// least 0.8× its rate and at most 1.5× its database CPU per intent.
//
// Each scenario is one file and one type implementing Scenario:
//
//	commits.go   0. PostgreSQL's commits per second, the machine's yardstick
//	drain.go     1. drain throughput, full path vs raw River no-op jobs and vs River + client
//	latency.go   2. latency-bound drain: efficiency against concurrency ÷ latency, and vs River + client
//	enqueue.go   3. Enqueue / EnqueueMany vs plain INSERT
//	e2e.go       4. commit → delivered latency at a steady rate
//	memory.go    5. peak RSS of `sendonce work` at concurrency 500
//	ratelimit.go 6. three `sendonce work` under a 20/s API limit: budget used, 429s, DB CPU
//	coalesce.go  7. a coalesced billing run under a 10/s limit
//	trouble.go   8. a provider that misbehaves: poison intents, DB CPU of waiting workers
//	idle.go      9. what an idle worker costs the database each second, vs an idle River client
//	history.go  10. reads, Reconcile and Prune beside a long sent history
//	tenants.go  11. fair shares among tenants: the drain's cost over 1,000 tenants, shares, quota, urgent latency
//
// The machinery they share: env.go (the database: a throwaway durable
// cluster unless BENCH_DATABASE_URL or DATABASE_URL names a server, and a
// database of the benchmark's own on it), drainer.go (timed drains of the
// outbox, of raw River and of River + client), intents.go (payloads and the
// fake API), cpu.go (processor time per job, of this process and of the
// database), wal.go (WAL written), costs.go (the costs per intent and the
// River + client row), samples.go and table.go (medians and the table),
// report.go (BENCHMARKS.md).
//
// # Running a scenario by hand
//
//	env, err := bench.Open(ctx, bench.EnvOptions{})
//	if err != nil { ... }
//	defer env.Close()
//	res, err := bench.DrainOutbox(ctx, env, bench.DrainParams{N: 10_000, Concurrency: 100})
//	fmt.Printf("%.0f intents/s\n", res.Rate())
//
// The package's Go benchmarks (go test -bench . ./cmd/internal/bench) time
// the enqueue paths alone, on the test suite's throwaway database, which
// runs without fsync: they compare code, not machines.
package bench
