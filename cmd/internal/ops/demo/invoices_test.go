package demo

import (
	"strings"
	"testing"
)

func TestPlanInvoices(t *testing.T) {
	p := planInvoices(200, 1, "beef")
	if got := len(p.declined()); got != 20 {
		t.Errorf("declined = %d, want 20 (one in ten)", got)
	}
	if got := len(p.committed()); got != 180 {
		t.Errorf("committed = %d, want 180", got)
	}
	if n := len(p.slow()); n < 180/slowEvery || n > 180/slowEvery+1 {
		t.Errorf("slow = %d, want one committed invoice in %d", n, slowEvery)
	}
	b := p.bounced()
	if committed := p.committed(); b != committed[len(committed)-1] || b.Slow {
		t.Errorf("the bouncing invoice %+v: want the last committed one, not slow", b)
	}
	seen := map[string]bool{}
	bounces := 0
	for _, inv := range p.invoices {
		if inv.Bounces {
			bounces++
		} else if strings.Contains(inv.Customer.Email, b.Customer.Email) {
			t.Errorf("%s goes to %s too: the bounce rule would take it", inv.ID, inv.Customer.Email)
		}
		if inv.Declined && inv.Slow {
			t.Errorf("%s is declined and slow: a declined invoice is never sent", inv.ID)
		}
		k := inv.Key()
		if k != "invoice:"+inv.ID || !strings.HasPrefix(k, p.keyPrefix()) || len(k) != len(p.invoices[0].Key()) {
			t.Errorf("key %q: want invoice:<id>, with the run's prefix, all of one length", k)
		}
		if seen[k] {
			t.Errorf("key %q twice", k)
		}
		seen[k] = true
	}
	if bounces != 1 {
		t.Errorf("%d invoices bounce, want 1", bounces)
	}

	// The seed decides the story; the tag only the ids.
	q := planInvoices(200, 1, "cafe")
	for i := range p.invoices {
		a, b := p.invoices[i], q.invoices[i]
		if a.Declined != b.Declined || a.Cents != b.Cents || a.Customer != b.Customer {
			t.Fatalf("invoice %d differs between two runs with the same seed", i)
		}
	}
	if got := len(planInvoices(3, 1, "beef").declined()); got != 1 {
		t.Errorf("3 invoices: declined = %d, want 1", got)
	}
}
