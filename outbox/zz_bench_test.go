package outbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/outboxtest"
	"github.com/sendonce/sendonce/internal/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestZZEnqueueRate(t *testing.T) {
	url := pgtest.NewDBURL(t)
	cfg, _ := pgxpool.ParseConfig(url)
	if m := os.Getenv("ZZMODE"); m != "" {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = m
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ob, _ := outbox.New(pool, nil)
	ctx := context.Background()
	for round := range 4 {
		start := time.Now()
		for b := range 30 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for i := range 100 {
					if _, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: fmt.Sprintf("k%d:%d:%d", round, b, i), Payload: outboxtest.InvoiceBody}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("round %d: %.0f/s", round, 3000/time.Since(start).Seconds())
	}
}
