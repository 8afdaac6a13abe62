package outbox

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/store"
)

// The breaker's defaults: the levels at which the providers review a
// sender (Amazon SES reviews an account at 5% bounces or 0.1% complaints,
// and may pause it at 10% and 0.5%), and a minimum of known outcomes
// below which a rate says too little (at 100, a list that bounces 1% shows
// 5 bounces or more 0.4% of the time, one that bounces 10% fewer than 5
// bounces 2.4% of the time; see docs/breaker.md).
const (
	DefaultBreakerBounceRate    = 0.05
	DefaultBreakerComplaintRate = 0.001
	DefaultBreakerMinOutcomes   = 100
)

// Breaker is a run's bounce-rate breaker: over the members whose delivery
// status the webhooks made known (delivered, bounced, complained), once at
// least MinOutcomes of them are known, a hard-bounce rate of BounceRate or
// more, or a complaint rate of ComplaintRate or more, pauses the run, in
// the transaction that records the outcome that crosses it. Every
// email.bounced counts as a hard bounce (the webhook body has no hard/soft
// distinction). A zero field takes its default; Off turns it off.
type Breaker struct {
	// Off turns the breaker off: the run is never paused by it.
	Off bool `json:"off,omitempty"`
	// BounceRate is the hard-bounce rate that trips it, in (0, 1]
	// (0: DefaultBreakerBounceRate).
	BounceRate float64 `json:"bounceRate,omitempty"`
	// ComplaintRate is the complaint rate that trips it, in (0, 1]
	// (0: DefaultBreakerComplaintRate).
	ComplaintRate float64 `json:"complaintRate,omitempty"`
	// MinOutcomes is the number of known outcomes under which it never
	// trips (0: DefaultBreakerMinOutcomes).
	MinOutcomes int `json:"minOutcomes,omitempty"`
}

// row validates b and fills in its defaults, as the run's columns hold it.
func (b *Breaker) row() (store.RunBreakerRow, error) {
	var v Breaker
	if b != nil {
		v = *b
	}
	for _, r := range []struct {
		name string
		rate float64
	}{{"breaker bounce rate", v.BounceRate}, {"breaker complaint rate", v.ComplaintRate}} {
		if r.rate < 0 || r.rate > 1 || math.IsNaN(r.rate) {
			return store.RunBreakerRow{}, invalid(r.name, fmt.Sprintf("%v: want a rate in (0, 1], as 0.05 for 5%%", r.rate))
		}
	}
	if v.MinOutcomes < 0 {
		return store.RunBreakerRow{}, invalid("breaker minimum", fmt.Sprintf("%d: want 1 or more known outcomes", v.MinOutcomes))
	}
	row := store.RunBreakerRow{MinOutcomes: v.MinOutcomes}
	if row.MinOutcomes == 0 {
		row.MinOutcomes = DefaultBreakerMinOutcomes
	}
	if !v.Off {
		bounce, complaint := v.BounceRate, v.ComplaintRate
		if bounce == 0 {
			bounce = DefaultBreakerBounceRate
		}
		if complaint == 0 {
			complaint = DefaultBreakerComplaintRate
		}
		row.BounceRate, row.ComplaintRate = &bounce, &complaint
	}
	return row, nil
}

// RunBreaker is a run's breaker as RunStatus reads it.
type RunBreaker struct {
	// Off: the breaker is off for the run.
	Off bool `json:"off"`
	// BounceRate, ComplaintRate and MinOutcomes are its settings.
	BounceRate    float64 `json:"bounceRate"`
	ComplaintRate float64 `json:"complaintRate"`
	MinOutcomes   int     `json:"minOutcomes"`
	// Known, Bounced and Complained count the members' outcomes it
	// judges: those since the run was last resumed from a trip (since the
	// start before any).
	Known      int64 `json:"known"`
	Bounced    int64 `json:"bounced"`
	Complained int64 `json:"complained"`
	// Reason is why it holds the run paused ("": it does not), with the
	// figures: "bounce rate 10.4% (52 of 500 known outcomes) >= 5%
	// threshold".
	Reason string `json:"reason,omitempty"`
	// TrippedAt is when it last tripped, with that trip's figures.
	TrippedAt      *time.Time `json:"trippedAt,omitempty"`
	TripKnown      int64      `json:"tripKnown,omitempty"`
	TripBounced    int64      `json:"tripBounced,omitempty"`
	TripComplained int64      `json:"tripComplained,omitempty"`
}

func runBreaker(r store.RunBreakerRow) *RunBreaker {
	b := &RunBreaker{
		Off: r.BounceRate == nil && r.ComplaintRate == nil, MinOutcomes: r.MinOutcomes,
		Known: r.Known, Bounced: r.Hard, Complained: r.Complained, Reason: r.PauseReason,
		TrippedAt: r.TrippedAt, TripKnown: r.TripKnown, TripBounced: r.TripHard, TripComplained: r.TripComplained,
	}
	if r.BounceRate != nil {
		b.BounceRate = *r.BounceRate
	}
	if r.ComplaintRate != nil {
		b.ComplaintRate = *r.ComplaintRate
	}
	return b
}

// SetRunBreaker changes a run's breaker (a zero field takes its default,
// as in Run.Breaker). It does not resume the run: ResumeRun does, and a
// resume of a run the breaker paused after a change of its settings is
// not warned about.
func (o *Outbox) SetRunBreaker(ctx context.Context, key string, b Breaker) (*RunStatus, error) {
	row, err := b.row()
	if err != nil {
		return nil, err
	}
	return o.runOp(ctx, key, "set the breaker of", func(tx pgx.Tx) error {
		_, err := store.SetRunBreaker(ctx, tx, key, row.BounceRate, row.ComplaintRate, row.MinOutcomes)
		return notFound(err, key)
	})
}

// resumeBreaker starts the breaker of the locked run key afresh if it
// paused the run: it judges the outcomes after the resume only, so the
// run is not paused again at once on the figures that paused it. A resume
// with the breaker's settings as they were at the trip is allowed, and
// logged as a warning with the figures.
func (o *Outbox) resumeBreaker(ctx context.Context, tx pgx.Tx, key string) error {
	r, err := store.ResumeBreaker(ctx, tx, key)
	if err != nil || r.Reason == "" {
		return err
	}
	if r.ChangedAt == nil || r.TrippedAt == nil || !r.ChangedAt.After(*r.TrippedAt) {
		o.logger.Warn("run resumed after its breaker paused it, with the breaker's settings unchanged",
			"run", key, "reason", r.Reason, "known", r.Known, "bounced", r.Hard, "complained", r.Complained)
	}
	return nil
}
