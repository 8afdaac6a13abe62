package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/store"
)

// The scopes of a breaker beside a run's own: a topic's bulk sending, and
// a tenant's.
const (
	BreakerTopic  = "topic"
	BreakerTenant = "tenant"
	// BreakerDefaults is the name that sets a scope's defaults.
	BreakerDefaults = "*"
	// DefaultScopeBreakerMinOutcomes is a topic's or a tenant's minimum of
	// known outcomes: ten times a run's. A run's own breaker stops one
	// stale list after 100; its topic's or tenant's judges the runs
	// together (many small runs, each under its own minimum), and pausing
	// them all needs more evidence.
	DefaultScopeBreakerMinOutcomes = 1000
)

// ScopeBreaker is the bounce-rate breaker of a topic's or a tenant's bulk
// sending (its runs' members), as Breakers reads it. Past its threshold,
// after its minimum of known outcomes, every active run of the topic (or
// tenant) with members left to send pauses, in the transaction that
// records the outcome that crosses it, and a run made while it holds is
// paused from its start; ResumeBreaker lets them go. Transactional
// intents (no run) are never paused, nor counted.
type ScopeBreaker struct {
	Scope string `json:"scope"` // BreakerTopic or BreakerTenant
	// Name is the topic, or the tenant ("" the default tenant);
	// BreakerDefaults: the scope's defaults.
	Name string `json:"name"`
	// Own says its settings are its own; else the scope's defaults' (with
	// Defaults), or the built-in ones (the run breaker's).
	Own      bool `json:"own"`
	Defaults bool `json:"defaults"`
	RunBreaker
}

// scopeName checks a scope and a name, as the settings hold them.
func scopeName(scope, name string) error {
	switch scope {
	case BreakerTopic:
		if name != BreakerDefaults && !topicRE.MatchString(name) {
			return invalid("breaker topic", fmt.Sprintf("%q: want a topic (%s) or %q for the topics' defaults", name, TopicPattern, BreakerDefaults))
		}
	case BreakerTenant:
		if name != BreakerDefaults && name != "" && (!validTenant(name) || name == "default") {
			return invalid("breaker tenant", fmt.Sprintf("%q: want a tenant (%s), \"\" for the default tenant, or %q for the tenants' defaults", name, TenantPattern, BreakerDefaults))
		}
	default:
		return invalid("breaker scope", fmt.Sprintf("%q: want %q or %q", scope, BreakerTopic, BreakerTenant))
	}
	return nil
}

// SetBreaker sets the breaker of a topic or a tenant (scope BreakerTopic
// or BreakerTenant; name BreakerDefaults: the scope's defaults, for every
// topic or tenant without settings of its own). A zero field takes its
// default (the rates as in Run.Breaker, the minimum
// DefaultScopeBreakerMinOutcomes). It does not resume what the breaker paused:
// ResumeBreaker does.
func (o *Outbox) SetBreaker(ctx context.Context, scope, name string, b Breaker) error {
	if err := scopeName(scope, name); err != nil {
		return err
	}
	if b.MinOutcomes == 0 {
		b.MinOutcomes = DefaultScopeBreakerMinOutcomes
	}
	row, err := b.row()
	if err != nil {
		return err
	}
	bounce, complaint := DefaultBreakerBounceRate, DefaultBreakerComplaintRate
	if row.BounceRate != nil {
		bounce, complaint = *row.BounceRate, *row.ComplaintRate
	}
	if err := store.SetScopeBreaker(ctx, o.pool, scope, name, b.Off, bounce, complaint, row.MinOutcomes); err != nil {
		return fmt.Errorf("outbox: set the breaker of %s %q: %w", scope, name, err)
	}
	return nil
}

// Breakers reads the breakers of the topics and tenants that have counted
// outcomes, settings or a trip, and the scopes' defaults; scope and name,
// when not empty, pick one scope, or one topic or tenant.
func (o *Outbox) Breakers(ctx context.Context, scope, name string) ([]*ScopeBreaker, error) {
	rows, err := store.ScopeBreakers(ctx, o.pool, scope, name)
	if err != nil {
		return nil, fmt.Errorf("outbox: read the breakers: %w", err)
	}
	out := make([]*ScopeBreaker, len(rows))
	for i, r := range rows {
		out[i] = &ScopeBreaker{Scope: r.Scope, Name: r.Name, Own: r.Own, Defaults: r.Defaults, RunBreaker: RunBreaker{
			Off: r.Off, BounceRate: r.BounceRate, ComplaintRate: r.ComplaintRate, MinOutcomes: r.MinOutcomes,
			Known: r.Known, Bounced: r.Hard, Complained: r.Complained, Reason: r.Reason, TrippedAt: r.TrippedAt,
			TripKnown: r.TripKnown, TripBounced: r.TripHard, TripComplained: r.TripComplained,
		}}
	}
	return out, nil
}

// BreakerPrefix is how the reason of a run paused by a topic's or a
// tenant's breaker begins: "topic news: ", "tenant acme: " ("tenant
// default: " for the default tenant).
func BreakerPrefix(scope, name string) string {
	if scope == BreakerTenant && name == "" {
		name = "default"
	}
	return scope + " " + name + ": "
}

// ResumeBreaker clears the trip of a topic's or a tenant's breaker (it
// then judges only the outcomes after the resume, so it does not trip
// again at once on the figures that tripped it) and resumes the runs it
// paused; it returns their keys. A resume with the breaker's settings as
// they were at the trip is allowed, and logged as a warning with the
// figures. A breaker that is not tripped is left as it is, and the runs
// it paused are resumed all the same.
func (o *Outbox) ResumeBreaker(ctx context.Context, scope, name string) ([]string, error) {
	if err := scopeName(scope, name); err != nil {
		return nil, err
	}
	if name == BreakerDefaults {
		return nil, invalid("breaker name", "the scope's defaults trip nothing: name a topic or a tenant")
	}
	var trippedAt, changedAt *time.Time
	var reason string
	var runs []string
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		var err error
		trippedAt, reason, changedAt, runs, err = store.ResumeScopeBreaker(ctx, tx, scope, name, BreakerPrefix(scope, name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: resume the breaker of %s %q: %w", scope, name, err)
	}
	if trippedAt != nil && (changedAt == nil || !changedAt.After(*trippedAt)) {
		o.logger.Warn("breaker resumed with its settings unchanged since it tripped", "scope", scope, "name", name, "reason", reason)
	}
	var resumed []string
	for _, key := range runs {
		if _, err := o.ResumeRun(ctx, key); err != nil {
			var rse *RunStateError
			if errors.As(err, &rse) {
				continue // canceled or resumed meanwhile
			}
			return resumed, err
		}
		resumed = append(resumed, key)
	}
	return resumed, nil
}
