package demo

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestSharedDatabaseGuard: on a database of the user's own, the demo runs
// beside the application's pending intents (on its own queue, which the
// demo's drains never claim), and refuses while an intent waits on the
// demo's queue, which its workers would send to the fake API.
func TestSharedDatabaseGuard(t *testing.T) {
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "app:1",
			Payload: []byte(`{"from":"a@example.com","to":"b@example.com","subject":"s","text":"t"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{pool: pool, out: io.Discard}
	if err := d.checkSharedDatabase(ctx); err != nil {
		t.Errorf("with the application's intent pending on its own queue: %v, want the demo to run", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET queue = $1`, Queue); err != nil {
		t.Fatal(err)
	}
	if err := d.checkSharedDatabase(ctx); err == nil || !strings.Contains(err.Error(), "1 intents") || !strings.Contains(err.Error(), Queue) {
		t.Errorf("with an intent pending on the demo's queue: %v, want a refusal naming it", err)
	}
}

func TestDescribeURLHidesThePassword(t *testing.T) {
	for _, url := range []string{
		"postgres://app:s3cret@db.example:5433/shop?sslmode=disable",
		"host=db.example port=5433 user=app password=s3cret dbname=shop",
	} {
		got, err := describeURL(url)
		if err != nil {
			t.Fatal(err)
		}
		if got != "app@db.example:5433/shop" {
			t.Errorf("describeURL(%q) = %q, want app@db.example:5433/shop", url, got)
		}
	}
	if _, err := describeURL("postgres://app:s3cret@db.example:notaport/shop"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a bad URL: err = %v, want an error without the password", err)
	}
}
