package outbox_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// TestListFilters checks the filters the outbox page offers: kind, a key
// prefix (in which "_" is a plain character, not a wildcard) and a range of
// enqueue times.
func TestListFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob := setup(t)
	for _, k := range []string{"invoice:2026-11-01", "invoice:2026-11-02", "invoice:2026-12-01", "invoiceX2026-11-03", "a_b:1", "axb:1"} {
		if _, err := enqueue(t, pool, ob, outbox.Intent{Key: k, Payload: json.RawMessage(invoiceBody)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_run (key) VALUES ('billing:2026-11')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET run_key = 'billing:2026-11' WHERE idempotency_key LIKE 'invoice:2026-11-%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET created_at = '2026-11-15T00:00:00Z' WHERE idempotency_key = 'invoice:2026-11-02'`); err != nil {
		t.Fatal(err)
	}
	keys := func(p outbox.ListParams) []string {
		t.Helper()
		recs, err := ob.List(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Key)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		p    outbox.ListParams
		want []string
	}{
		{"prefix", outbox.ListParams{KeyPrefix: "invoice:2026-11-"}, []string{"invoice:2026-11-01", "invoice:2026-11-02"}},
		{"underscore is no wildcard", outbox.ListParams{KeyPrefix: "a_"}, []string{"a_b:1"}},
		{"kind", outbox.ListParams{Kind: outbox.KindBatch}, nil},
		{"run", outbox.ListParams{Run: "billing:2026-11"}, []string{"invoice:2026-11-01", "invoice:2026-11-02"}},
		{"kind email", outbox.ListParams{Kind: outbox.KindEmail, KeyPrefix: "a"}, []string{"a_b:1", "axb:1"}},
		{"created range", outbox.ListParams{CreatedFrom: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
			CreatedBefore: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}, []string{"invoice:2026-11-02"}},
		{"created before", outbox.ListParams{KeyPrefix: "invoice:", CreatedBefore: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
			[]string{"invoice:2026-11-02"}},
	} {
		if got := keys(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := ob.List(ctx, &outbox.ListParams{Kind: "fax"}); err == nil {
		t.Error("an unknown kind was accepted")
	}
}
