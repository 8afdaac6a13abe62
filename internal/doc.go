// Package internal holds sendonce's code that is not for import by users.
// Its folders are the layers, from the bottom up; production code imports
// only downwards (TestLayers holds it):
//
//	base/     under outbox and worker: the River job kinds (sendjob), the
//	          rate budget (budget), the address rules (suppress), cron specs
//	          (cronspec), trace context (tracing), the pending-migration
//	          error (schemaerr), the unsubscribe tokens (unsub), plans for
//	          reads by unsettled state (planguard). They import nothing of
//	          sendonce's but migrations and each other.
//	          (above them: the public client, outbox, webhook, migrations)
//	engine/   the worker's state machine (sendstate): claim an intent, record
//	          what the API answered, rescue what a crashed worker left. Used
//	          by package worker and the operator surfaces.
//	          (above it: the public worker)
//	ops/      the operator surfaces of cmd/sendonce: /metrics (metrics), the
//	          HTTP server (httpserver), the outbox page (outboxui), the
//	          one-click unsubscribe endpoint (unsubscribe), the embedded
//	          default of `sendonce demo` (demo).
//	machine/  PostgreSQL and its companions on this machine: a throwaway
//	          cluster (pgcluster), a throwaway PgBouncer (pgbouncer), the
//	          system packages they need (sysdeps). For demo, tests and tools.
//
// Beside the layers, never imported by production code:
//
//	testkit/  kits for tests: a migrated test database (pgtest), outbox
//	          assertions (outboxtest), a goroutine-safe buffer (syncbuf),
//	          the address forms' table (addrforms), the poison intents of
//	          the bench and the integration test (poison).
//	checks/   tests of the repository itself: the README's quick start runs
//	          (readme), docker-compose.yml loads (composecheck).
//	bench/    the benchmark harness behind `make bench`.
//	cmd/      the developers' commands: bench, sysdeps, withpg.
package internal
