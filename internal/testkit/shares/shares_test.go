package shares_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/shares"
)

// Deliveries are counted by the tenant their key names, in the window
// their delivery time falls in; those before the first window or after
// the last are left out; shares are of the tenants named.
func TestWindowsCountByTenant(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(key string, s float64) fakeapi.Delivery {
		return fakeapi.Delivery{IdempotencyKey: key, DeliveredAt: t0.Add(time.Duration(s * float64(time.Second)))}
	}
	ds := []fakeapi.Delivery{at("a:1", -1), at("a:2", 0), at("b:1", 9.9), at("a:3", 10), at("c:1", 10.5), at("a:3", 11), at("a:4", 20)}
	w := shares.Windows(ds, t0, 10*time.Second, 2)
	if got := fmt.Sprint(w); got != "[map[a:1 b:1] map[a:2 c:1]]" {
		t.Fatalf("windows %s", got)
	}
	got, of := shares.Of(w[1], "a", "b", "c")
	if of != 3 || fmt.Sprintf("%.2f", got) != "[0.67 0.00 0.33]" {
		t.Fatalf("shares of window 1: %.2f of %d", got, of)
	}
	if text := shares.Text(w[1], "a", "c"); text != "a 2, c 1 (a 66.7%, c 33.3%)" {
		t.Fatalf("text %q", text)
	}
	if dup := shares.Duplicates(ds); fmt.Sprint(dup) != "[a:3]" {
		t.Fatalf("duplicates %v, want [a:3]", dup)
	}
	if got, of := shares.Of(map[string]int{"q": 3}, "a", "b"); of != 0 || got[0] != 0 {
		t.Fatalf("shares of a window without a or b: %v of %d", got, of)
	}
}
