package worker

import (
	"container/heap"
	"math"
	"sync"
	"time"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// fair shares a worker's claims among the tenants with due intents: each
// claim asks for so many intents of each tenant (sendstate.ClaimShares),
// as weighted fair queueing would serve them. Every tenant has a pass,
// its virtual time, which grows by 1/weight for each intent it is given;
// the next intent goes to the due tenant with the least pass. A tenant
// that comes due joins at the class's virtual time (the pass of the last
// intent given), so an idle tenant banks no credit and reserves nothing,
// and one with little to send takes what it needs and leaves the rest.
// The transactional class (intents without a run) is served before the
// bulk class (intents of runs), each with passes of its own.
//
// Each worker shares its own claims so; since every worker of the fleet
// gives each tenant its weight's part of the tokens it gets, the fleet
// does too. Which tenants are due, their weights and what their limits
// leave come from sendstate.DueTenants, looked up again at least every
// fairLookEvery (longer when a look is slow: see fairLookShare), sooner
// after a wake (a new intent, one come due) or a
// share that came back short; the claim itself holds each tenant to its
// limits across the fleet.
type fair struct {
	mu       sync.Mutex
	classes  [2]fairClass  // transactional, bulk
	looked   time.Time     // the last look (DueTenants)
	lookTook time.Duration // how long the last look took, statement and all
	poked    bool          // a wake or a short share since
	// wakeIn, when set, is told when a tenant held back by its limits may
	// send again while no other is due, so that the drain looks then.
	wakeIn func(time.Duration)
	// recent counts what was claimed, by tenant, for the lease's reports.
	recent recentClaims
}

// fairClass is one priority class's tenants.
type fairClass struct {
	vt      float64 // the pass of the last intent given
	tenants map[string]*fairTenant
}

// fairTenant is one tenant of one class as the scheduler sees it.
type fairTenant struct {
	name   string
	pass   float64
	weight int
	due    bool      // it had an intent due at the last look, and no share came back short since
	allow  int       // intents its limits allowed at the last look, less those given since
	until  time.Time // its limits hold it back until then
	picked int       // intents given in the pick under way
}

const (
	// fairLookEvery is how often the scheduler looks again at which
	// tenants are due while it claims: what comes due without a wake
	// (none is missed: a look at least this often), and a tenant's
	// changed settings, take effect within it.
	fairLookEvery = time.Second
	// fairLookMin is the least time between two looks when wakes and
	// short shares ask for them: at most 20 looks a second, whatever
	// the rate of new intents.
	fairLookMin = 50 * time.Millisecond
	// fairLookShare bounds the time looks take: a look that took d is
	// made again no sooner than fairLookShare × d later (at most 1% of
	// the time, when the look is slow: a thousand tenants with intents
	// pending and their dead index entries cost a look 3 to 11 ms), and
	// one asked for by a wake or a short share no sooner than a tenth of
	// that.
	fairLookShare = 100
)

// poke says the tenants due may have changed: the next claim looks first.
func (f *fair) poke() {
	f.mu.Lock()
	f.poked = true
	f.mu.Unlock()
}

// needLook reports whether the next claim should look at the tenants
// first.
func (f *fair) needLook(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	since := now.Sub(f.looked)
	if f.looked.IsZero() || since >= max(fairLookEvery, fairLookShare*f.lookTook) {
		return true
	}
	return f.poked && since >= max(fairLookMin, fairLookShare/10*f.lookTook)
}

// update takes a look's findings (sendstate.DueTenants, begun at now).
func (f *fair) update(ts []sendstate.DueTenant, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.looked, f.poked, f.lookTook = now, false, time.Since(now)
	seen := [2]map[string]bool{{}, {}}
	for _, d := range ts {
		ci := 0
		if d.Bulk {
			ci = 1
		}
		c := &f.classes[ci]
		if c.tenants == nil {
			c.tenants = map[string]*fairTenant{}
		}
		t := c.tenants[d.Tenant]
		if t == nil {
			t = &fairTenant{name: d.Tenant, pass: c.vt}
			c.tenants[d.Tenant] = t
		}
		if d.Due && !t.due {
			t.pass = math.Max(t.pass, c.vt) // joins now: no credit banked while idle
		}
		t.due, t.weight, t.allow = d.Due, max(d.Weight, 1), d.Allow
		t.until = time.Time{}
		if d.Allow <= 0 {
			t.until = now.Add(d.Wait)
		}
		seen[ci][d.Tenant] = true
	}
	// A tenant with nothing pending is forgotten: its pass would be
	// raised to the virtual time when it comes back anyway.
	for ci := range f.classes {
		for name := range f.classes[ci].tenants {
			if !seen[ci][name] {
				delete(f.classes[ci].tenants, name)
			}
		}
	}
}

// ready reports whether t may be given intents at now.
func (t *fairTenant) ready(now time.Time) bool {
	if !t.due {
		return false
	}
	if t.allow > 0 {
		return true
	}
	// Held back by its limits: at until, a rate has given a token back,
	// a quota's period has ended; the claim says whether it has.
	return !t.until.IsZero() && !now.Before(t.until)
}

// shares gives n intents to the ready tenants of the first class that
// has one, by weight, quantum at a time (see fairQuantum), and returns them as the shares of one claim (at most
// sendstate.MaxShares tenants; the first given first). None when no
// tenant is ready; then, if one is held back by its limits, wakeIn is
// told when it may send.
func (f *fair) shares(n, quantum int, now time.Time) []sendstate.Share {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ci := range f.classes {
		c := &f.classes[ci]
		var h fairHeap
		for _, t := range c.tenants {
			if t.ready(now) {
				t.picked = 0
				h = append(h, t)
			}
		}
		if len(h) == 0 {
			continue
		}
		heap.Init(&h)
		var order []*fairTenant
		for left := n; left > 0 && len(h) > 0; {
			t := h[0]
			if t.picked == 0 {
				if len(order) == sendstate.MaxShares {
					break
				}
				order = append(order, t)
			}
			k := min(quantum, left)
			if t.allow < math.MaxInt32 {
				k = min(k, t.allow)
			}
			t.picked += k
			left -= k
			c.vt = t.pass
			t.pass += float64(k) / float64(t.weight)
			t.allow -= k
			if t.allow == 0 {
				// What its limits allowed is given: the claim
				// says whether it has more; until then it waits.
				t.until = now.Add(fairRetryHeld)
				heap.Pop(&h)
				continue
			}
			heap.Fix(&h, 0)
		}
		out := make([]sendstate.Share, len(order))
		for i, t := range order {
			out[i] = sendstate.Share{Bulk: ci == 1, Tenant: t.name, N: t.picked}
		}
		return out
	}
	f.wakeHeld(now)
	return nil
}

// fairQuantum is how many intents a tenant is given at a time: its
// intents are next to one another in the due index, so a claim reads four
// of one tenant's for about what one costs, and a claim of many intents
// names a quarter as many tenants. The shares stay in proportion to the
// weights; a tenant's pass is at most a quantum's worth (4/weight) ahead
// of another's.
const fairQuantum = 4

// fairRetryHeld is how long a tenant whose limits allowed no more at the
// last look waits before a claim asks for it again: the claim holds it to
// its limits, and a look says more.
const fairRetryHeld = 100 * time.Millisecond

// wakeHeld tells wakeIn when the first tenant held back by its limits
// may send. f.mu is held.
func (f *fair) wakeHeld(now time.Time) {
	if f.wakeIn == nil {
		return
	}
	var first time.Time
	for ci := range f.classes {
		for _, t := range f.classes[ci].tenants {
			if t.due && t.allow <= 0 && !t.until.IsZero() && (first.IsZero() || t.until.Before(first)) {
				first = t.until
			}
		}
	}
	if !first.IsZero() {
		f.wakeIn(first.Sub(now))
	}
}

// took takes back what shares gave that the claim did not find: a share
// that came back short gives its tenant's pass back for the intents it
// did not get, and the tenant is not due until the next look (it ran
// dry, other workers took the rest, or its limits stopped it), which
// comes at the next claim. It reports whether a share came back short.
func (f *fair) took(shares []sendstate.Share, claimed []*sendstate.DrainClaim) (short bool) {
	got := map[sendstate.Share]int{}
	now := time.Now()
	for _, c := range claimed {
		got[sendstate.Share{Bulk: c.RunKey != "", Tenant: c.Tenant}]++
		f.recent.add(c.Tenant, 1, now)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range shares {
		n := got[sendstate.Share{Bulk: s.Bulk, Tenant: s.Tenant}]
		if n >= s.N {
			continue
		}
		short = true
		ci := 0
		if s.Bulk {
			ci = 1
		}
		if t := f.classes[ci].tenants[s.Tenant]; t != nil {
			t.pass -= float64(s.N-n) / float64(t.weight)
			t.due = false
		}
	}
	if short {
		f.poked = true
	}
	return short
}

// fairHeap orders tenants by pass, then name.
type fairHeap []*fairTenant

func (h fairHeap) Len() int { return len(h) }
func (h fairHeap) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return h[i].pass < h[j].pass
	}
	return h[i].name < h[j].name
}
func (h fairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *fairHeap) Push(x any)   { *h = append(*h, x.(*fairTenant)) }
func (h *fairHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
