// Package outboxui is the outbox page of `sendonce work`: intents, not
// jobs, in a browser, at /outbox/ on the --http-addr listener, behind the
// same token as the River UI (see internal/ops/httpserver).
//
// It is server-rendered with html/template from embedded templates, with no
// JavaScript at all, and answers what an operator asks during an incident:
//
//	GET  /outbox/          overview: intents by state and by delivery status, the
//	                       oldest pending age, sends per minute over the last
//	                       hour, the fleet's send budget and runs, recent failures
//	                       grouped by error, and the tenants when there is more
//	                       than the default one
//	GET  /outbox/intents   the intents, filtered by state, delivery status, kind,
//	                       key prefix, run and enqueue time, paged by id
//	GET  /outbox/intent    one intent (?key=…): its fields, payload (addresses
//	                       shown, bodies collapsed), its place on the drain (or River job) and delivery events
//	GET  /outbox/retry     confirm a retry (?key=…); POST does it
//	GET  /outbox/cancel    confirm a cancel (?key=…); POST does it
//
// It reads through package outbox (Get, List, Stats, Runs) and reads the
// rest with plain SQL (events, sends per minute, the budget). Retry and
// cancel are outbox.Retry and outbox.Cancel, with their rules: a failed
// intent whose retry could deliver it a second time is refused with the
// same text as `sendonce retry`, and goes only when the operator ticks a
// box to force it. They are off unless Options.Actions is set (`sendonce
// work --ui-actions`); each is a POST carrying a per-process form token
// (CSRF), and is logged with the name of the token the operator used.
// Everything from an intent (payload, errors, events) is escaped by
// html/template, and a Content-Security-Policy allows no script at all.
package outboxui
