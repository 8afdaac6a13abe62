// Package fakeapi is a fake OpenEmail HTTP API: the project's stand-in for the
// real one, as stripe-mock is for Stripe. Tests, the demo and docker-compose run
// against it, and the integration suite kills workers in the middle of sends and
// then reads its delivery ledger to prove that every email went out exactly once.
//
// Its value is faithfulness. It follows the contract documents
// (shared/openemail-api.md and shared/retry-contract.md), never a client's
// convenience, and shares no code with the client package: where a client breaks
// the wire contract (a bare string for "to", [] where an object belongs, an
// idempotency key the API refuses), the fake refuses it as the API would.
//
// # Starting one
//
// In a test, NewTest starts a fake on a loopback port and closes it when the
// test ends:
//
//	srv := fakeapi.NewTest(t, fakeapi.Config{})
//	// point the code under test at srv.URL(), with an API key such as oe_test_x
//	// ... run it ...
//	if err := srv.WaitDeliveries(ctx, 1); err != nil { t.Fatal(err) }
//	deliveries := srv.DeliveriesTo("ann@example.com")
//
// Elsewhere: srv := New(cfg); url, err := srv.Start("127.0.0.1:0"); defer
// srv.Close(). Handler returns the fake as an http.Handler to mount yourself. As a
// separate process, run cmd/openemail-fake; everything below is then reachable
// over HTTP under /_fake/.
//
// # Endpoints
//
// Paths have no /v1 prefix, as in the API.
//
//	POST  /emails                  send one email                 (Idempotency-Key)
//	POST  /emails/batch            send {"emails":[…]}            (Idempotency-Key)
//	POST  /templates/{id}/send     send a template (id or slug)   (Idempotency-Key)
//	POST  /broadcasts              create = send a broadcast      (Idempotency-Key)
//	GET   /emails/{id}             an email
//	GET   /emails                  list: status (comma list), from, limit, cursor
//	PATCH /emails/{id}             reschedule: {"scheduledAt": instant}
//	POST  /emails/{id}/cancel      cancel a scheduled email (no body)
//	GET   /broadcasts              list: audienceId, limit, cursor
//	GET   /broadcasts/{id}         a broadcast
//	POST  /broadcasts/{id}/cancel  cancel a scheduled broadcast (no body)
//
// A send answers 200 with the created resource and "replayed": false, or, for a
// replay, the stored resource in its current state with "replayed": true. An
// email is {"id":"em_…","status","from","to","cc","bcc","subject","templateId",
// "scheduledAt","createdAt","sentAt","cancelledAt"}; a broadcast is
// {"id":"bc_…","status","from","subject","audienceIds","scheduledAt",
// "createdAt","sentAt","cancelledAt"}; a batch is {"data":[item…],"sent":n,
// "failed":n,"replayed":bool} with one item per requested email, in request
// order: the email, or, for one the API refused on its own (see Per-email
// refusals), {"status":"failed","to":[…],"error":{"type","code","message",
// "param"}} with no id. The contract names only id, status, replayed and the
// batch fields; the rest is the fake's choice. Instants are
// UTC with milliseconds (2030-01-02T15:04:05.000Z). Lists use the envelope
// {"data":[…],"hasMore":bool,"nextCursor":string|null}, newest first; limit is 1
// to 100 (default 20).
//
// Any other path is 404 and a known path under another method is 405 (with
// Allow), both in the error shape below. Everything else the real API offers
// (webhook management, domains, templates CRUD, …) is not faked; the fake
// does send webhook events (see Webhooks).
//
// # Authentication and errors
//
// Every API request needs "Authorization: Bearer oe_test_…" or "Bearer
// oe_live_…" (restricted to Config.APIKeys when that is set); otherwise 401
// authentication_error with code missing_api_key, invalid_authorization_header
// or invalid_api_key. Authentication comes before routing, so an unknown path
// without a key is 401, not 404. Keys are never logged or recorded, only their
// prefix ("oe_test_…").
//
// Every answer carries an x-request-id header (req_…), and every error has the
// body
//
//	{"error":{"type":"…","code":"…","message":"…","param":"…"|null,"requestId":"req_…"}}
//
// with "fields":[{"key","error"}] added to validation errors. The codes:
//
//	400 invalid_request_error  invalid_json, invalid_idempotency_key, invalid_cursor,
//	                           invalid_fault (bad X-Fake-Fault), unreadable_body
//	401 authentication_error   missing_api_key, invalid_authorization_header, invalid_api_key
//	404 not_found_error        not_found
//	405 invalid_request_error  method_not_allowed
//	409 conflict_error         email_already_sent, broadcast_already_sent, email_cancelled
//	413 invalid_request_error  request_too_large (Config.MaxBodyBytes, default 10 MiB)
//	422 validation_error       missing_field, invalid_field, invalid_address, missing_content,
//	                           unsupported_field, idempotency_key_reuse
//	422 invalid_request_error  recipient_rejected or another reject fault's code (a single send)
//	429 rate_limit_error       rate_limited (Config.Rate, and the rate_limit/retry_after faults)
//
// # Idempotency
//
// The four sends take an Idempotency-Key, as the API does:
//
//   - A key is 1 to 255 characters of letters, digits, '_', '.', ':' and '-';
//     anything else, including an empty header, is 400 invalid_idempotency_key.
//   - A send without the header is accepted and simply sent: each such request
//     sends again.
//   - The key is claimed before anything is delivered. A repeat with the same key,
//     the same endpoint and the same body (compared as canonical JSON: key order
//     and whitespace do not matter) replays the stored resource in its current
//     state with "replayed": true and the same id. Requests racing on one key
//     never deliver twice: a later one waits for the first to finish, then
//     replays.
//   - The same key with another body or on another endpoint is 422
//     idempotency_key_reuse, even if the new body would also be invalid.
//   - A request refused before the claim (auth, a bad body, validation, a
//     before-fault) stores nothing: the key stays free. So does a single send
//     a reject fault refuses (see Per-email refusals): the key is released.
//   - A batch's answer is stored whole, refused emails included: its replay
//     lists the same items in the same order (the sent emails in their
//     current state) and sends nothing.
//   - Keys are scoped per API key and forgotten Config.KeyWindow (default 24 h)
//     after their claim, measured on Config.Now; after that the same key sends
//     again.
//
// # Validation
//
// Refusals are 422 validation_error naming the parameter in param (for a batch,
// "emails[2].to"; for a list item, "to[1]"):
//
//   - from is required and must be an address ("a@b.c" or "Name <a@b.c>");
//   - to is required, a non-empty array of addresses; cc and bcc, when present,
//     arrays of addresses. A bare string is refused: the SDKs always send arrays
//     (openemail-api.md §7, item 9), so a bare string is a client bug;
//   - an email needs content: a non-empty html or text, a draftId, or a template
//     object; a template send gets its content (and subject) from the template
//     and needs only from and to; a broadcast needs from, subject, content and an
//     audience (audienceId and/or audienceIds);
//   - scheduledAt is an RFC 3339 string; one not in the future means "send now";
//   - headers, tags, tracking, template, values and the other object-only keys
//     (and props/slots) must be JSON objects: an empty one is {}, never [];
//   - an attachment is {"fileId"} or {"filename","content"} with base64 content;
//   - a batch is validated whole: one malformed email refuses the request (422
//     naming "emails[i].field") and nothing of it is sent or stored; the
//     caller must take that email out and send the others again.
//
// Unknown fields are accepted and ignored, as the SDKs pass them through.
//
// # Per-email refusals
//
// The API may also refuse an email it finds well formed but will not deliver
// (a suppressed or rejected recipient). The fake does so only when told, with
// the reject fault (see Faults), which acts after validation and after the
// key is claimed, email by email:
//
//   - In a batch, a refused email is not sent and makes no message and no
//     Delivery; the others are sent as usual. The answer is still 200, its
//     data holding in the refused email's place
//     {"status":"failed","to":[…],"error":{"type":"invalid_request_error",
//     "code":"recipient_rejected","message":"…","param":"emails[2].to"}}
//     (param names to, or the cc or bcc that held the matching recipient),
//     and "failed" counts them. When every email is refused the answer is
//     still 200, with "sent": 0. The whole answer is stored under the key.
//   - A single send (POST /emails, POST /templates/{id}/send) that is refused
//     is answered 422 invalid_request_error with the rule's code and param
//     "to" (or "cc", "bcc", as above), and stores nothing: no message, and
//     the key is free again, as after a validation error, so the same key
//     sends once the cause is gone. The contract says nothing of this; the
//     fake takes the refusal as made before anything was sent.
//   - Broadcasts are never refused.
//
// # Scheduled sends
//
// A send with scheduledAt in the future answers status "scheduled" and is not in
// the ledger until it falls due on Config.Now. Due sends are promoted lazily
// before every read (API reads, Deliveries, WaitDeliveries) and by a background
// loop every Config.SchedulerInterval, so with an injected clock a test moves the
// clock and reads. Statuses: scheduled → sent, or scheduled → cancelled.
//
// Cancel (POST …/cancel) of a scheduled message makes it cancelled for good; a
// second cancel answers it unchanged (clients retry cancel, so a retry after a
// lost answer must succeed); cancelling a sent one is 409 email_already_sent (or
// broadcast_already_sent). PATCH /emails/{id} with {"scheduledAt"} moves a
// scheduled email (a time not in the future sends it now); a sent email is 409
// email_already_sent, a cancelled one 409 email_cancelled; any other field is
// 422 unsupported_field.
//
// # Rate limit
//
// Config.Rate (--rate on the command) limits each API key, as the API does:
//
//	cfg.Rate, err = fakeapi.ParseRate("10/s,500/m")   // or []RateLimit{{Count: 10, Per: time.Second}}
//
// Each limit is COUNT/UNIT with UNIT s, m or h; with several, every one must
// hold. Each is a token bucket per API key that refills at its rate and holds
// one second's worth of it, but at least one token: 10/s admits a burst of 10
// and then one request every 100 ms; 600/m the same; 5/m one request, then one
// every 12 s. Buckets start full, refill on Config.Now (so a test moves its
// clock instead of sleeping), and POST /_fake/reset fills them again.
//
// What counts: every authenticated API request, whatever its method, path or
// outcome (a GET, a 404, a 422, a replay and a request a fault answers all
// spend a token). Requests refused by authentication are not counted (they
// have no key to count against), nor are the /_fake/ control endpoints.
//
// A request over a limit is answered right after authentication with
//
//	429 {"error":{"type":"rate_limit_error","code":"rate_limited","message":"…","param":null,"requestId":"req_…"}}
//
// and goes no further: its body is not read, no fault fires or spends its
// times count, its Idempotency-Key is not claimed and nothing is delivered,
// so the same send retried after the limit lifts is a fresh send, not a
// replay. A refused request spends no token of any limit.
//
// By default the 429 carries no Retry-After: the API sends none
// (retry-contract.md §3), so a faithful client raises at once. Two options
// change that, for testing clients against servers that do more:
//
//   - Config.RateRetryAfter (--rate-retry-after): the 429 carries Retry-After,
//     the whole seconds (rounded up, so at least 1) until every limit of the
//     key has a token again.
//   - Config.RateHeaders (--rate-headers): every answer to an authenticated
//     request, passed or refused, carries the IETF draft fields
//     RateLimit-Limit (the bucket's capacity), RateLimit-Remaining (whole
//     tokens left after this request) and RateLimit-Reset (whole seconds,
//     rounded up, until the bucket is full). With several limits they
//     describe the one closest to refusing. X-RateLimit-* is not sent: its
//     Reset means epoch seconds to some servers and a delay to others.
//
// With RateHeaders the answers also carry RateLimit-Policy, each limit as
// CAPACITY;w=SECONDS (the window its bucket refills in: 20/s is 20;w=1,
// 5/m is 1;w=12) and each quota as COUNT;w=86400, so a client can tell the
// rate from RateLimit-Limit.
//
// # Quota
//
// Config.Quota (--quota on the command, "500/d" or "100000/mo", see
// ParseQuota) counts each API key's requests per calendar day (or month) in
// UTC, never paces them: the requests the rate limiter passed count. Past
// the quota a request is answered
//
//	429 {"error":{"type":"rate_limit_error","code":"daily_quota_exceeded","message":"You have reached the daily sending quota of this API key (500/d). It resets at 2030-01-02T00:00:00Z. …"}}
//
// (monthly_quota_exceeded for a month) with Retry-After, the whole seconds
// until midnight UTC, and goes no further; it counts against no quota.
// This is what email APIs with sending quotas answer: a daily limit reset
// at midnight UTC, a 429 whose body names it and a wait until the reset
// (Resend's daily_quota_exceeded, Emailit's "Daily limit exceeded" with
// retry_after). The API of the contract documents no quota; the fake's is
// for testing clients against one. Server.QuotaRefused counts the refusals.
//
// A refusal by the limiter is recorded with RateLimited set in its
// RequestRecord (an injected rate_limit fault shows in Fault instead), and
// Server.RateLimited counts them.
//
// # Ledger and request log
//
// Every message actually delivered is a Delivery in the ledger: MessageID,
// IdempotencyKey, Kind (email, batch, template, broadcast), To, Cc, Bcc, From,
// Subject, TemplateID, DeliveredAt, RequestID and the canonical Payload. A batch
// makes one per email it sent (a refused email makes none); a broadcast one,
// with its audience ids as To. Read it with
// Deliveries, DeliveriesTo or GET /_fake/deliveries[?to=addr], and wait for it
// with WaitDeliveries, which blocks on a signal, not a poll.
//
// Every API request is a RequestRecord, added on arrival: time received and
// answered, method, path, query, Idempotency-Key, key prefix, status answered
// (0 while in flight or when dropped, 499 when the client went away first),
// Dropped, Replayed, RateLimited (refused by the rate limiter), the fault rules
// that fired, Rejected (how many emails a reject fault refused) and the
// Retry-After sent. Read it with Requests or GET
// /_fake/requests; WaitRequests waits for requests to end.
//
// The control endpoints need no key, are never faulted and are not logged:
//
//	GET  /_fake/deliveries[?to=addr]   {"data":[Delivery…]}
//	GET  /_fake/requests               {"data":[RequestRecord…],"rateLimited":n}
//	GET  /_fake/webhooks               {"data":[WebhookAttempt…],"sent":n}
//	GET  /_fake/faults                 {"faults":["rule",…],"seed":n}
//	POST /_fake/faults                 {"faults":["rule",…],"seed":n}: replace the rules (seed optional)
//	POST /_fake/reset                  forget everything: messages, keys, ledger, log, counts,
//	                                   webhook events queued and attempts recorded;
//	                                   fill the rate buckets; restore the configured rules;
//	                                   restart the RNG from the seed
//	GET  /_fake/health                 {"ok":true}
//
// # Faults
//
// A fault rule is text:
//
//	kind[=value][;option=value]...
//
// ':' may stand for ';' where an option name follows it, so flags can read
// "error_before=503:times=2:to=flaky@" while a colon inside a value
// ("key=invoice:42") survives. Several rules are separated by commas or
// newlines. Kinds, with what they do to a matching request:
//
//	error_before[=STATUS]   answer STATUS (default 503) before handling: nothing claimed, stored or sent
//	rate_limit              answer 429 rate_limit_error with no Retry-After (as the API does)
//	retry_after=VALUE       answer status (option, default 429) with Retry-After: VALUE, before handling;
//	                        VALUE is seconds as written ("2", "1.5", "120" to ask for more than
//	                        a minute) or an HTTP-date from the fake's clock: "date", "date+5s", "date-5s"
//	latency=DURATION        sleep before handling; a client that gives up ends it, nothing is handled
//	error_after[=STATUS]    handle (deliver and store), then answer STATUS (default 503): answer lost
//	drop_after              handle, then close the connection with no answer (TCP reset)
//	latency_after=DURATION  handle, then sleep before answering: the window to kill a worker in
//	reject[=CODE]           while handling a send, refuse each email it matches with CODE (default
//	                        recipient_rejected): in a batch that email is listed as failed and the
//	                        others are sent; a single send is answered 422 and stores nothing
//
// and, acting on the webhook events of each email delivered rather than on
// the request (see Webhooks; without Config.WebhookURL they do nothing):
//
//	bounce                  the email's event is email.bounced instead of email.delivered
//	complain                the email's event is email.complained instead of email.delivered
//	delay_then_bounce       two events: email.delivery_delayed, then email.bounced
//	webhook_duplicate       the event is POSTed twice in a row: same event id, same delivery id
//	webhook_out_of_order[=N] the event is held back until N (default 1) later events were sent,
//	                        or WebhookHoldMax (2 s) passed
//	webhook_delay=DURATION  the event is held back DURATION; later events are sent meanwhile
//	webhook_bad_signature   the event is signed with a wrong secret
//	webhook_stale           the event is signed with t WebhookStaleBy (301 s) in the past
//
// Options select requests and limit firing:
//
//	to=TEXT      any recipient (to/cc/bcc, any email of a batch) contains TEXT, case-insensitive;
//	             for reject, a recipient of the email itself
//	key=TEXT     the Idempotency-Key contains TEXT
//	path=GLOB    the path matches (path.Match): /emails, /emails/*, /templates/*/send
//	method=M     the method is M
//	times=N      fire at most N times, counted per API key and Idempotency-Key (requests
//	             without a key share one count): "503 twice then success" per send
//	p=P          fire with probability P, drawn from the RNG seeded by Config.Seed
//	status=S     the status of error_before, error_after, retry_after
//
// After-kinds act only on successful answers. Latencies of several firing rules
// add up; of the rules that decide the answer, the first to fire wins and later
// ones neither fire nor spend their times count. times counts firings, so with
// p a rule fires on at most N requests. reject fires per email: for each email
// the first reject rule to fire refuses it, p is drawn for each matching email
// and each refused email spends one of times, so "reject;times=2" refuses the
// first two emails of a batch. A replay runs no reject rule and spends nothing.
//
// The webhook kinds match an email by its own recipients (to=) and its
// Idempotency-Key (key=); path= and method= are refused for them. Of bounce,
// complain and delay_then_bounce the first to fire decides the email's
// events (p drawn and times spent per email); every webhook_ rule that
// matches fires on each event (p drawn and times spent per event), so
// several combine. times counts per API key and Idempotency-Key, as above.
// In an X-Fake-Fault header they apply to the emails that request creates,
// also when a scheduled one falls due later.
//
// Rules come from four places: Config.Faults (and the --fault flag of the command),
// SetFaults at run time, POST /_fake/faults, and, for one request, the
// X-Fake-Fault header (several rules comma-separated, or several headers). Header
// rules are checked first. A header rule's times count is keyed by its text, so a
// client that repeats the same header on every retry of a call sees "fail twice,
// then succeed":
//
//	X-Fake-Fault: drop_after;times=1
//	X-Fake-Fault: error_before=503;times=2
//	X-Fake-Fault: latency_after=30s;key=invoice:
//	X-Fake-Fault: reject=suppressed;to=bounced@
//
// and from flags or Go:
//
//	--fault 'drop_after:p=0.2' --fault 'error_before=503:times=2:to=flaky@'
//	srv.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, RetryAfter: "120", Status: 503})
//
// Config.Seed makes probabilistic faults repeatable: the same seed and the same
// sequence of requests give the same faults. A zero seed picks one, which Seed
// returns and New logs, so a failing run can be replayed.
//
// # Webhooks
//
// With Config.WebhookURL and Config.WebhookSecret (--webhook-url and
// --webhook-secret or OPENEMAIL_WEBHOOK_SECRET on the command), the fake
// POSTs a signed event to the URL for every Delivery of an email (each email
// of a batch, a scheduled email when it falls due; broadcasts make none, as
// the fake does not know their recipients):
//
//	POST <WebhookURL>
//	Content-Type: application/json
//	X-OpenEmail-Event: email.delivered
//	X-OpenEmail-Delivery: whd_<32 hex>
//	X-OpenEmail-Signature: t=<unix seconds>,v1=<64 lowercase hex>
//
//	{"id":"evt_<32 hex>","type":"email.delivered","createdAt":"2030-01-02T15:04:05.000Z",
//	 "data":{"emailId":"em_…","to":["ann@example.com"]}}
//
// The contract (openemail-api.md §2.4) says only that the body is a JSON
// object with a top-level id and type, and names the three headers; the
// createdAt and data layout, the evt_ and whd_ prefixes and what
// X-OpenEmail-Event and X-OpenEmail-Delivery carry are the fake's choice.
// data.emailId is the id the send answered; data.to the email's to as sent.
// The type is email.delivered unless a bounce, complain or
// delay_then_bounce rule says otherwise (see Faults).
//
// The signature follows §2.4 and §7 item 10: v1 is the lowercase hex
// HMAC-SHA256, keyed by the secret's raw bytes, of "<t>.<raw body>", with t
// the Unix seconds of Config.Now at that attempt (so a test with an injected
// clock verifies against the same clock). SignWebhook computes it. The
// secret is never logged nor recorded.
//
// One sender goroutine posts the events asynchronously, in the order they
// were made, one at a time. A non-2xx answer or a network error is retried
// after 50, 100 and 200 ms (WebhookAttempts in all, each bounded by
// WebhookTimeout), then the event is given up. A retry, and the second copy
// of webhook_duplicate, carries the same body, event id and
// X-OpenEmail-Delivery, with a fresh t and signature.
//
// Server.Webhooks (GET /_fake/webhooks) lists every attempt as a
// WebhookAttempt: event id, delivery id, type, email id, copy, attempt, t,
// status answered (0 with Error after a network error) and the rules that
// fired. WebhooksSent counts the events the sender is done with (2xx or
// given up; a duplicate counts once) and WaitWebhooks(ctx, n) waits for n of
// them. Close stops the sender: queued events are not sent.
//
// A drop on a reused keep-alive connection is retried by net/http's Transport
// on its own when the request carries an Idempotency-Key (it counts such
// requests as replayable), so a Go client may see the replay instead of the
// drop; use one connection per request to see the drop itself.
package fakeapi
