package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/base/store"
)

const (
	// apiLatency is the fake API's think time before every send, about a
	// real API's, so the progress bar has something to show.
	apiLatency = 20 * time.Millisecond
	// slowAnswer is how long the fake API holds the answer of a slow send
	// after delivering it. It must stay under the workers' --api-timeout.
	slowAnswer = time.Second
)

// startFake is step 2: the fake OpenEmail API in this process, with a slow
// answer for the slow invoices' first send (times=1, so a replay is
// answered at once), and signed delivery webhooks to the workers'
// --webhook-addr, the bouncing invoice's as email.bounced.
func (d *demo) startFake() error {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	secret, err := newWebhookSecret()
	if err != nil {
		return err
	}
	d.hookAddr, d.hookSecret = addr, secret

	faults := []fakeapi.Fault{{Kind: fakeapi.FaultLatency, Delay: apiLatency, Path: "/emails"}}
	for _, inv := range d.plan.slow() {
		faults = append(faults, fakeapi.Fault{Kind: fakeapi.FaultLatencyAfter, Delay: slowAnswer, Key: inv.Key(), Times: 1})
	}
	faults = append(faults, fakeapi.Fault{Kind: fakeapi.FaultBounce, To: d.plan.bounced().Customer.Email})
	srv := fakeapi.New(fakeapi.Config{
		Faults:        faults,
		Seed:          d.opts.Seed,
		WebhookURL:    "http://" + addr + webhookPath,
		WebhookSecret: secret,
	})
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		srv.Close()
		return fmt.Errorf("demo: start the fake OpenEmail API: %w", err)
	}
	d.fake = srv
	d.onCleanup("closed the fake API", func() error { srv.Close(); return nil })

	d.section(2, "A fake OpenEmail API")
	d.say("Listening on %s, in this process. Like the real API it remembers idempotency", url)
	d.say("keys: a repeated key gets the stored message back (replayed: true) and nothing is sent.")
	d.say("It keeps a ledger of what it delivers, which the report counts. To give the crash below")
	d.say("a target, it answers 1 send in %d only %s after delivering it (fault latency_after):", slowEvery, slowAnswer)
	d.say("the email is out, but its worker has not yet written \"sent\" down. And like the API it")
	d.say("reports what became of each email with a signed webhook, to %s%s.", addr, webhookPath)
	return nil
}

// webhookPath is where `sendonce work --webhook-addr` takes the API's
// delivery webhooks.
const webhookPath = "/webhooks/openemail"

// freeLoopbackAddr finds a free port on 127.0.0.1 for the workers'
// webhook listener. Worker 1 listens on it, and worker 2 on the same after
// the kill, so the fake's events go to whichever is alive.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo: find a free port for the webhooks: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("demo: find a free port for the webhooks: %w", err)
	}
	return addr, nil
}

// newWebhookSecret makes the run's webhook signing secret: random, handed
// to the fake and to the workers (OPENEMAIL_WEBHOOK_SECRET), never shown.
func newWebhookSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("demo: make a webhook secret: %w", err)
	}
	return "whsec_demo_" + hex.EncodeToString(b), nil
}

// deliveredUnrecorded returns the keys the fake API has delivered whose
// intents are not yet marked sent: sends in the window between the API's
// delivery and the outbox's record of it.
func (d *demo) deliveredUnrecorded(ctx context.Context) ([]string, error) {
	var delivered []string
	for _, dl := range d.fake.Deliveries() {
		delivered = append(delivered, dl.IdempotencyKey)
	}
	if len(delivered) == 0 {
		return nil, nil
	}
	out, err := store.DemoUnsent(ctx, d.pool, delivered)
	if err != nil {
		return nil, fmt.Errorf("demo: read the outbox: %w", err)
	}
	return out, nil
}
