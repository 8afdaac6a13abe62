// Package httpserver is the operations listener of `sendonce work`: liveness
// and readiness probes, Prometheus metrics and the River UI, on one address
// that is loopback unless the operator says otherwise.
//
//	GET /healthz    200 "ok" while the process serves at all
//	GET /readyz     200 "ok" when the database answers a ping within a short
//	                timeout; 503 and the reason otherwise, or while draining
//	GET /metrics    Prometheus exposition
//	    /riverui/   the River UI and its API (/riverui/api/...)
//	    /outbox/    the outbox page (package internal/outboxui)
//
// The River UI can cancel, retry and delete jobs, and the outbox page retry
// and cancel intents, so both are guarded alike: when a token is
// configured, every /riverui and /outbox request must carry one, as a bearer
// token ("Authorization: Bearer TOKEN") or as the password of HTTP basic
// authentication (any user name), which lets a browser prompt for it. The
// probes and /metrics stay open, as scrapers and orchestrators expect. The
// command refuses to listen beyond loopback without a token (see
// IsLoopback).
package httpserver
