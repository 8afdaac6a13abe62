package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// PlainTable is the enqueue baseline's table: the outbox's shape, without
// triggers or River jobs.
const PlainTable = "bench_plain"

// APIKey is the test key every benchmark client sends to the fake API.
const APIKey = "oe_test_bench"

// Payload is the body of the i-th benchmark email: a typical
// transactional email of about 300 bytes.
func Payload(i int) []byte {
	return fmt.Appendf(nil, `{"from":"Shop <orders@shop.example.com>","to":["customer%d@example.com"],`+
		`"subject":"Your order #%d has shipped","text":"Hello, your order #%d is on its way. `+
		`Track it at https://shop.example.com/orders/%d. Thank you for shopping with us."}`, i, i, i, i)
}

// Recipient is the address of the i-th benchmark email.
func Recipient(i int) string { return fmt.Sprintf("customer%d@example.com", i) }

// EmailParams is the email of Payload(i) as client parameters, sent to to:
// what the River + client baseline builds from its job's arguments.
func EmailParams(to string, i int) *client.EmailParams {
	return &client.EmailParams{
		From:    "Shop <orders@shop.example.com>",
		To:      client.Recipients{to},
		Subject: fmt.Sprintf("Your order #%d has shipped", i),
		Text: fmt.Sprintf("Hello, your order #%d is on its way. Track it at https://shop.example.com/orders/%d. "+
			"Thank you for shopping with us.", i, i),
	}
}

// Intents returns n email intents with keys prefix:0 … prefix:n-1.
func Intents(prefix string, n int) []outbox.Intent {
	in := make([]outbox.Intent, n)
	for i := range in {
		in[i] = outbox.Intent{Key: fmt.Sprintf("%s:%d", prefix, i), Kind: outbox.KindEmail, Payload: Payload(i)}
	}
	return in
}

// EnqueueBatches enqueues intents with EnqueueMany, batch at a time, one
// transaction per batch.
func EnqueueBatches(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, intents []outbox.Intent, batch int) error {
	for len(intents) > 0 {
		n := min(batch, len(intents))
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueMany(ctx, tx, intents[:n])
			return err
		})
		if err != nil {
			return fmt.Errorf("bench: enqueue: %w", err)
		}
		intents = intents[n:]
	}
	return nil
}

// Fake is an in-process fake OpenEmail API and a client pointed at it.
type Fake struct {
	Server *fakeapi.Server
	Client *client.Client
}

// StartFake starts a fake API on a loopback port that waits latency before
// handling each request (none when zero), and a client for it that keeps
// up to conns idle connections to it, as `sendonce work` does (net/http's
// default keeps two per host, so a worker with more sends in flight would
// open a new connection for most requests).
func StartFake(latency time.Duration, conns int) (*Fake, error) {
	var cfg fakeapi.Config
	if latency > 0 {
		cfg.Faults = []fakeapi.Fault{{Kind: fakeapi.FaultLatency, Delay: latency}}
	}
	srv := fakeapi.New(cfg)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("bench: start fake API: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = max(conns, 2)
	transport.MaxIdleConns = max(conns, transport.MaxIdleConns) // as sendonce work's (apiTransport)
	c, err := client.New(client.WithAPIKey(APIKey), client.WithBaseURL(url),
		client.WithHTTPClient(&http.Client{Transport: transport}))
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("bench: client: %w", err)
	}
	return &Fake{Server: srv, Client: c}, nil
}

// Close stops the fake.
func (f *Fake) Close() { f.Server.Close() }

// discard is the logger handed to workers and River: their per-send
// lines would cost time that production would spend on a real log sink.
var discard = slog.New(slog.DiscardHandler)
