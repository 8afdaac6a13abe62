// Package internal holds sendonce's code that is not for import by users.
// Its folders are the layers, from the bottom up; production code imports
// only downwards (TestLayers holds it):
//
//	base/     under outbox and worker: every statement on sendonce's and
//	          River's tables, each beside its Go function (store: the one
//	          owner of the intent's row, held by checks/oneowner), the River job kinds (sendjob), the
//	          rate budget (budget), the address rules (suppress), cron specs
//	          (cronspec), the pending-migration
//	          error (schemaerr), the unsubscribe tokens (unsub), plans for
//	          reads by unsettled state (planguard). They import nothing of
//	          sendonce's but migrations and each other.
//	          (above them: the public client, outbox, webhook, migrations)
//	engine/   the worker's state machine (sendstate): claim an intent, record
//	          what the API answered, rescue what a crashed worker left, by
//	          store's statements. Used
//	          by package worker and the operator surfaces.
//	          (above it: the public worker)
//	ops/      the operator surfaces of cmd/sendonce: the HTTP server
//	          (httpserver), the one-click unsubscribe endpoint
//	          (unsubscribe), the operator's view of tenants (tenants);
//	          /metrics, the outbox page and `sendonce demo` are in
//	          cmd/internal/ops (below).
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
//	checks/   tests of the repository itself: no SQL on sendonce's tables
//	          outside base/store (oneowner); the README's quick start runs,
//	          the docs' Go snippets compile, and a user's module gets none of
//	          the command's dependencies (readme); every relative link of the
//	          Markdown leads somewhere (links).
//	cmd/      the developers' commands: sysdeps, withpg.
//
// The command's module (cmd/go.mod, see docs/modules.md) has a tree of the
// same shape, cmd/internal, for the packages that need a dependency a
// library user should not inherit; each keeps the place and the layer it had
// here: cmd/internal/base/tracing (the OpenTelemetry SDK and exporters of
// `sendonce work`), cmd/internal/ops/metrics (/metrics, Prometheus),
// cmd/internal/ops/outboxui (the outbox page; chromedp in its tests),
// cmd/internal/ops/demo (`sendonce demo`, progressbar),
// cmd/internal/checks/composecheck (docker-compose.yml loads, compose-go),
// cmd/internal/bench and cmd/internal/cmd/bench (the benchmark harness and
// command behind `make bench`).
package internal
