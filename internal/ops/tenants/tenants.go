// Package tenants is the operator's view of tenants (issue 46, see
// docs/tenants.md): what `sendonce tenants`, `sendonce tenant show` and
// `set`, the outbox page and /metrics show of each tenant (its weight and
// limits, what it used of them, its backlog, its share of the fleet's
// claims, what holds it back), read through internal/base/store, and the
// words and flags for them.
package tenants

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// BacklogCap is where a backlog's count stops: "10,000+" is more than it.
const BacklogCap = store.TenantBacklogCap

// Tenant is one tenant's figures.
type Tenant struct {
	// Name is the tenant's name, outbox.DefaultTenant for the default
	// tenant.
	Name string `json:"tenant"`
	// Configured says it has settings (sendonce tenant set); without them
	// it has weight 1 and no limits.
	Configured bool `json:"configured"`
	Weight     int  `json:"weight"`
	// Rate is its rate as given (5/s), "" for none; RatePerSecond the
	// same in requests a second.
	Rate          string   `json:"rate,omitempty"`
	RatePerSecond *float64 `json:"ratePerSecond,omitempty"`
	// QuotaDay and QuotaMonth are its quotas of first attempts per UTC day
	// and month, nil for none; UsedToday and UsedThisMonth what the
	// fleet's claims counted against them.
	QuotaDay      *int64 `json:"quotaDay,omitempty"`
	QuotaMonth    *int64 `json:"quotaMonth,omitempty"`
	UsedToday     int64  `json:"usedToday"`
	UsedThisMonth int64  `json:"usedThisMonth"`
	// Backlog is its intents pending without a River job.
	Backlog Backlog `json:"backlog"`
	// Claimed is the intents the live workers claimed for it in the last
	// minute, and Share that of all they claimed (0 to 1); both nil when
	// no live worker says (a worker of a release before tenants, or none
	// running).
	Claimed *int64   `json:"claimedLastMinute"`
	Share   *float64 `json:"share"`
	// HeldBy says what holds it back now: a used-up quota, its rate, a
	// paused run. Empty: nothing.
	HeldBy []Hold `json:"heldBy"`
	// UpdatedAt is when its settings last changed.
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
}

// Backlog is a tenant's pending intents without a River job, by class,
// each counted up to BacklogCap (More: there are more than that).
type Backlog struct {
	// Transactional is its intents of no run, Bulk those of runs.
	Transactional     int64 `json:"transactional"`
	Bulk              int64 `json:"bulk"`
	TransactionalMore bool  `json:"transactionalMore,omitempty"`
	BulkMore          bool  `json:"bulkMore,omitempty"`
}

// Empty says there is no backlog.
func (b Backlog) Empty() bool { return b.Transactional == 0 && b.Bulk == 0 }

// String is the backlog for a person: "12 transactional, 10,000+ bulk",
// "0".
func (b Backlog) String() string {
	var parts []string
	if b.Transactional > 0 {
		parts = append(parts, Count(b.Transactional, b.TransactionalMore)+" transactional")
	}
	if b.Bulk > 0 {
		parts = append(parts, Count(b.Bulk, b.BulkMore)+" bulk")
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// backlog turns store's capped counts into a Backlog.
func backlog(n [2]int64) Backlog {
	return Backlog{Transactional: min(n[0], BacklogCap), Bulk: min(n[1], BacklogCap),
		TransactionalMore: n[0] > BacklogCap, BulkMore: n[1] > BacklogCap}
}

// The reasons a tenant is held back, as Hold.Reason and the metrics'
// reason label.
const (
	HeldQuotaDay   = "quota_day"
	HeldQuotaMonth = "quota_month"
	HeldRate       = "rate"
	HeldPausedRun  = "paused_run"
)

// Reasons lists every reason, in the order a tenant's are given.
var Reasons = []string{HeldQuotaDay, HeldQuotaMonth, HeldRate, HeldPausedRun}

// Hold is one thing that holds a tenant back now.
type Hold struct {
	// Reason is one of Reasons.
	Reason string `json:"reason"`
	// Until is when a quota's period ends (UTC), nil for the others.
	Until *time.Time `json:"until,omitempty"`
	// Text says it for a person: "quota 10000/d until 00:00 UTC", "rate
	// 5/s", "paused run billing:acme".
	Text string `json:"text"`
}

// held says what holds the tenant of f back now. A tenant with nothing
// pending is held by nothing; otherwise by each limit that allows no claim
// now (the claim's own rule: see store.TenantFigures), and by its paused
// runs with pending members.
func held(f store.TenantFigures) []Hold {
	var out []Hold
	if f.Backlog[0]+f.Backlog[1] > 0 {
		if f.DayHeld && f.QuotaDay != nil {
			until := f.Day.AddDate(0, 0, 1).UTC()
			out = append(out, Hold{Reason: HeldQuotaDay, Until: &until, Text: fmt.Sprintf("quota %d/d until 00:00 UTC", *f.QuotaDay)})
		}
		if f.MonthHeld && f.QuotaMonth != nil {
			until := f.Month.AddDate(0, 1, 0).UTC()
			out = append(out, Hold{Reason: HeldQuotaMonth, Until: &until,
				Text: fmt.Sprintf("quota %d/mo until %s", *f.QuotaMonth, until.Format("2006-01-02 15:04 UTC"))})
		}
		if f.RateHeld && f.Rate != nil {
			out = append(out, Hold{Reason: HeldRate, Text: "rate " + FormatRate(*f.Rate)})
		}
	}
	switch {
	case f.PausedRuns == 1:
		out = append(out, Hold{Reason: HeldPausedRun, Text: "paused run " + f.PausedRun})
	case f.PausedRuns > 1:
		out = append(out, Hold{Reason: HeldPausedRun, Text: fmt.Sprintf("%d paused runs (%s, …)", f.PausedRuns, f.PausedRun)})
	}
	return out
}

// HeldText is what holds the tenant back, for a person: "-" for nothing.
func (t Tenant) HeldText() string {
	if len(t.HeldBy) == 0 {
		return "-"
	}
	texts := make([]string, len(t.HeldBy))
	for i, h := range t.HeldBy {
		texts[i] = h.Text
	}
	return strings.Join(texts, "; ")
}

// LimitsText is the tenant's limits and what it used of its quotas:
// "5/s, 10000/d (120 used today), 300000/mo (3400 used this month)",
// "none".
func (t Tenant) LimitsText() string {
	var parts []string
	if t.Rate != "" {
		parts = append(parts, t.Rate)
	}
	if t.QuotaDay != nil {
		parts = append(parts, fmt.Sprintf("%d/d (%d used today)", *t.QuotaDay, t.UsedToday))
	}
	if t.QuotaMonth != nil {
		parts = append(parts, fmt.Sprintf("%d/mo (%d used this month)", *t.QuotaMonth, t.UsedThisMonth))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ShareText is the tenant's share of the fleet's claims in the last
// minute: "42% (1,234)", "0%", "-" when no worker says.
func (t Tenant) ShareText() string {
	if t.Share == nil || t.Claimed == nil {
		return "-"
	}
	if *t.Claimed == 0 {
		return "0%"
	}
	return fmt.Sprintf("%s%% (%s)", strconv.FormatFloat(math.Round(*t.Share*1000)/10, 'f', -1, 64), Count(*t.Claimed, false))
}

// tenant makes a Tenant of its figures and the fleet's claims.
func tenant(f store.TenantFigures, claims store.TenantClaims) Tenant {
	t := Tenant{Name: outbox.TenantName(f.Tenant), Configured: f.Configured, Weight: f.Weight, RatePerSecond: f.Rate,
		QuotaDay: f.QuotaDay, QuotaMonth: f.QuotaMonth, Backlog: backlog(f.Backlog), HeldBy: held(f), UpdatedAt: f.UpdatedAt}
	if f.Rate != nil {
		t.Rate = FormatRate(*f.Rate)
	}
	if f.QuotaDay != nil || f.QuotaMonth != nil || f.Rate != nil {
		t.UsedToday, t.UsedThisMonth = f.DayUsed, f.MonthUsed
	}
	if claims.Reporting > 0 {
		n := claims.ByTenant[f.Tenant]
		share := 0.0
		if claims.Total > 0 {
			share = float64(n) / float64(claims.Total)
		}
		t.Claimed, t.Share = &n, &share
	}
	if t.HeldBy == nil {
		t.HeldBy = []Hold{}
	}
	return t
}

// List is a page of tenants.
type List struct {
	Tenants []Tenant
	// Next, when more tenants follow, is the name to page on from (the
	// last one's).
	Next string
	// Claims is what the live workers claimed in the last minute.
	Claims store.TenantClaims
}

// Read reads up to limit tenants with intents pending or with settings,
// in name order, the default tenant first: those after the tenant after
// (store's name: "" for the default tenant), or from the first when after
// is nil, all in one snapshot. The read goes through the due index only
// (planguard.Run), a few probes and a bounded count per tenant.
func Read(ctx context.Context, db planguard.Beginner, after *string, limit int) (*List, error) {
	name := ""
	if after != nil {
		name = *after
	}
	l := &List{}
	err := planguard.Run(ctx, db, func(tx pgx.Tx) error {
		figs, err := store.TenantsRead(ctx, tx, name, after == nil, limit)
		if err != nil {
			return fmt.Errorf("tenants: %w", err)
		}
		if l.Claims, err = store.TenantClaimsRead(ctx, tx); err != nil {
			return fmt.Errorf("tenants: claims of the last minute: %w", err)
		}
		if len(figs) > limit {
			figs = figs[:limit]
			l.Next = outbox.TenantName(figs[limit-1].Tenant)
		}
		for _, f := range figs {
			l.Tenants = append(l.Tenants, tenant(f, l.Claims))
		}
		return nil
	})
	return l, err
}

// ReadOne reads the tenant name (store's: "" for the default tenant),
// whether it has settings or intents or not.
func ReadOne(ctx context.Context, db planguard.Beginner, name string) (Tenant, error) {
	var t Tenant
	err := planguard.Run(ctx, db, func(tx pgx.Tx) error {
		f, err := store.TenantRead(ctx, tx, name)
		if err != nil {
			return fmt.Errorf("tenant %s: %w", outbox.TenantName(name), err)
		}
		claims, err := store.TenantClaimsRead(ctx, tx)
		if err != nil {
			return fmt.Errorf("tenant %s: claims of the last minute: %w", outbox.TenantName(name), err)
		}
		t = tenant(f, claims)
		return nil
	})
	return t, err
}

// InUse reports whether there is more than the default tenant to show: a
// tenant with settings, or another tenant with intents pending. The
// outbox page shows its tenants only then, so that a sender for one
// customer sees nothing new.
func InUse(ctx context.Context, db planguard.Beginner) (bool, error) {
	var used bool
	err := planguard.Run(ctx, db, func(tx pgx.Tx) error {
		var err error
		used, err = store.TenantsInUse(ctx, tx)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("tenants: %w", err)
	}
	return used, nil
}

// Set changes the settings of the tenant name (store's: "" for the default
// tenant), in one statement; what c leaves out is kept. Workers take the
// change at their next look at the tenants, within a second.
func Set(ctx context.Context, db store.DB, name string, c store.TenantChange) error {
	if err := store.TenantSet(ctx, db, name, c); err != nil {
		return fmt.Errorf("cannot set tenant %s: %w", outbox.TenantName(name), err)
	}
	return nil
}

// Reset deletes the settings of the tenant name (store's): weight 1 and no
// limits again, its counts forgotten. It reports whether it had any.
func Reset(ctx context.Context, db store.DB, name string) (bool, error) {
	had, err := store.TenantReset(ctx, db, name)
	if err != nil {
		return false, fmt.Errorf("cannot reset tenant %s: %w", outbox.TenantName(name), err)
	}
	return had, nil
}

// ParseName is the tenant a command names: outbox.DefaultTenant is the
// default tenant (""), any other name must pass outbox.ValidateTenant.
func ParseName(s string) (string, error) {
	switch s {
	case outbox.DefaultTenant:
		return "", nil
	case "":
		return "", errors.New(`want a tenant's name, or "default" for the default tenant`)
	}
	if err := outbox.ValidateTenant(s); err != nil {
		return "", err
	}
	return s, nil
}

// ShareNote says what the shares are of: the intents claimed in the last
// minute by the live workers that say, and those not shown by tenant
// ("of the 10 intents claimed in the last minute by 2 live workers").
func ShareNote(c store.TenantClaims) string {
	switch {
	case c.Live == 0:
		return "no live worker"
	case c.Reporting == 0:
		return fmt.Sprintf("unknown: %s says what it claimed (a release before tenants)", workers(c.Live, "none of the %d live workers", "the live worker never"))
	}
	s := fmt.Sprintf("of the %s intents claimed in the last minute by %s", Count(c.Total, false),
		workers(c.Reporting, "%d live workers", "1 live worker"))
	if n := c.Live - c.Reporting; n > 0 {
		s += workers(n, " (%d more do not say)", " (1 more does not say)")
	}
	if n := c.ByTenant["*"]; n > 0 {
		s += fmt.Sprintf("; %s of them for tenants beyond each worker's busiest 100, not shown by tenant", Count(n, false))
	}
	return s
}

// workers is many (a format of n) or, when n is 1, one.
func workers(n int, many, one string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

// Count writes n with thousands separated by commas, and a "+" when more:
// "10,000+".
func Count(n int64, more bool) string {
	s := strconv.FormatInt(n, 10)
	start := 0
	if n < 0 {
		start = 1
	}
	for i := len(s) - 3; i > start; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if more {
		s += "+"
	}
	return s
}

// FormatRate writes a rate in requests a second as a whole count per
// second, minute or hour when it is one ("5/s", "1/m", "2/h"), the first
// that is; otherwise per second, to four figures.
func FormatRate(perSecond float64) string {
	for _, u := range []struct {
		per  float64
		unit string
	}{{1, "s"}, {60, "m"}, {3600, "h"}} {
		n := perSecond * u.per
		if r := math.Round(n); r >= 1 && math.Abs(n-r) < 1e-6*r {
			return strconv.FormatInt(int64(r), 10) + "/" + u.unit
		}
	}
	return strconv.FormatFloat(perSecond, 'g', 4, 64) + "/s"
}

// Fleet is what /metrics reports of the tenants: the default tenant and
// the first configured ones by name, each by itself, and the others added
// up.
type Fleet struct {
	// Named are the default tenant, first, and up to the number asked of
	// the tenants with settings, by name.
	Named []Tenant
	// Other adds up every other tenant.
	Other Other
	// Claims is what the live workers claimed in the last minute.
	Claims store.TenantClaims
}

// Other is what the tenants a Fleet does not name add up to.
type Other struct {
	// Backlog is their intents pending without a River job, counted up to
	// BacklogCap a class in all.
	Backlog Backlog
	// Held counts, by reason (Reasons), those of them it holds back now.
	Held map[string]int64
	// Claimed is the intents claimed for them in the last minute, those the
	// workers did not attribute ("*") included.
	Claimed int64
}

// ReadFleet reads the figures of the default tenant and of the first
// named tenants with settings (by name), and adds up the others, in one
// snapshot through the due index (planguard.Run). Its cost grows with
// named and the tenants with settings, not with the intents nor with the
// tenants that have intents.
func ReadFleet(ctx context.Context, db planguard.Beginner, named int) (*Fleet, error) {
	f := &Fleet{}
	err := planguard.Run(ctx, db, func(tx pgx.Tx) error {
		figs, err := store.TenantsNamedRead(ctx, tx, named)
		if err != nil {
			return fmt.Errorf("tenants: %w", err)
		}
		other, err := store.TenantsOtherRead(ctx, tx, named)
		if err != nil {
			return fmt.Errorf("tenants: the others: %w", err)
		}
		if f.Claims, err = store.TenantClaimsRead(ctx, tx); err != nil {
			return fmt.Errorf("tenants: claims of the last minute: %w", err)
		}
		shown := map[string]bool{}
		for _, fig := range figs {
			f.Named = append(f.Named, tenant(fig, f.Claims))
			shown[fig.Tenant] = true
		}
		f.Other = Other{Backlog: backlog(other.Backlog), Held: map[string]int64{HeldRate: other.RateHeld,
			HeldQuotaDay: other.DayHeld, HeldQuotaMonth: other.MonthHeld, HeldPausedRun: other.Paused}}
		for name, n := range f.Claims.ByTenant {
			if !shown[name] {
				f.Other.Claimed += n
			}
		}
		return nil
	})
	return f, err
}
