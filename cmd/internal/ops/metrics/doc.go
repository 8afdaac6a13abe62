// Package metrics holds the Prometheus collectors of `sendonce work`: what
// the worker did with each attempt, what the OpenEmail API was asked and how
// long it took, and how the outbox stands, read from the database when
// Prometheus scrapes.
//
// Everything lives in a registry of its own (with the Go runtime and process
// collectors), so a program embedding the worker can serve it beside its own
// metrics without name clashes. Three sources feed it:
//
//   - the worker, through Metrics.Observe (a worker.Observer): one outcome per
//     attempt, counted in sendonce_sends_total{kind,result}, with
//     sendonce_replays_total and sendonce_retries_total broken out, and the
//     client call's duration in sendonce_api_call_duration_seconds{kind};
//   - the OpenEmail client's HTTP transport, through InstrumentTransport: one
//     count and one duration per HTTP attempt, so the client's own retries are
//     visible (sendonce_api_requests_total{method,code},
//     sendonce_api_request_duration_seconds{method},
//     sendonce_api_request_errors_total{method} for attempts with no response);
//   - the database, through WatchOutbox: sendonce_outbox_intents{state} and
//     sendonce_outbox_oldest_pending_age_seconds, read with Outbox.Stats at
//     scrape time; and likewise WatchBudget, WatchRuns and WatchTenants
//     (sendonce_tenant_backlog{tenant,class},
//     sendonce_tenant_claimed_last_minute{tenant},
//     sendonce_tenant_held{tenant,reason}, whose tenant label names the
//     default tenant and at most NamedTenants configured ones, and adds up
//     the rest as OtherTenant).
//
// Wiring it up:
//
//	m := metrics.New()
//	m.WatchOutbox(ob, 5*time.Second, logger) // ob from outbox.New
//	m.WatchTenants(pool, 5*time.Second, logger)
//	c, _ := client.New(client.WithHTTPClient(&http.Client{Transport: m.InstrumentTransport(nil)}))
//	w, _ := worker.New(pool, &worker.Config{Client: c, Send: worker.SendConfig{Observer: m}})
//	http.Handle("/metrics", m.Handler())
package metrics
