// Package httpserver is the operations listener of `sendonce work`: liveness
// and readiness probes, Prometheus metrics and the River UI, on one address
// that is loopback unless the operator says otherwise.
//
//	GET /healthz    200 "ok" while the process serves at all
//	GET /readyz     200 "ok" when the database answers a ping within a short
//	                timeout; 503 and the reason otherwise, or while draining
//	GET /metrics    Prometheus exposition
//	    /riverui/   the River UI and its API (/riverui/api/...)
//	    /outbox/    the outbox page (package cmd/internal/ops/outboxui)
//
// The River UI can cancel, retry and delete jobs, and the outbox page retry
// and cancel intents, so both are guarded alike: when a token is
// configured, every /riverui and /outbox request must carry one, as a bearer
// token ("Authorization: Bearer TOKEN") or as the password of HTTP basic
// authentication (any user name), which lets a browser prompt for it. The
// command refuses to listen beyond loopback without a token (see
// IsLoopback), and without a token both answer only a request whose Host
// is a loopback name or address (localhost, 127.x.x.x, [::1]), so that a
// web page whose name was re-pointed at 127.0.0.1 (DNS rebinding) cannot
// read or drive them from the operator's browser (see RequireLocalHost).
//
// The probes and /metrics stay open, to any Host, as scrapers and
// orchestrators expect: they change nothing and show no intent, and a
// scraper may name the machine as it likes.
package httpserver
