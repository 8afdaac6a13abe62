package outboxui

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// overviewData is the overview page.
type overviewData struct {
	// Health answers "is sending healthy?", at the top.
	Health     health
	States     []count
	Deliveries []count
	Oldest     time.Duration
	// Due and Scheduled split the pending intents: due now, or held until
	// a send time ahead (NextScheduled the soonest).
	Due, Scheduled int64
	NextScheduled  *time.Time
	// WebhookAddr is where this process takes delivery webhooks ("": none);
	// LastEvent is when any worker last stored one.
	WebhookAddr string
	LastEvent   *time.Time
	// Workers are the fleet's instances, from their liveness leases.
	Workers  []workerRow
	Chart    chart
	Budgets  []budgetRow
	Runs     []runRow
	Failures []failureGroup
	// Unsubscribes are the unsubscribes per topic (one-click and by hand).
	Unsubscribes []outbox.TopicUnsubscribes
	// Tenants is nil unless there is more than the default tenant.
	Tenants *tenantsPanel
}

type count struct {
	Name  string
	N     int64
	Class string
}

// runRow is a run's progress.
type runRow struct {
	Key                                  string
	State                                outbox.RunState
	Sent, Pending, Failed, Total, Minute int64
	Left                                 time.Duration
	// Breaker is why the run's bounce-rate breaker holds it paused ("":
	// it does not), with the figures.
	Breaker string
}

type budgetRow struct {
	Key    string
	Line   string
	Paused bool
}

// failureGroup is the failed intents of the last day that share an error.
type failureGroup struct {
	Error string
	N     int64
	// Uncertain counts those of them that may have been delivered (an
	// attempt may have reached the API: a 5xx, a timeout, a lost answer).
	Uncertain int64
	Latest    time.Time
	Example   string // one key, to open
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d, err := h.readOverview(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cannot read the outbox", err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", "Outbox", d)
}

func (h *Handler) readOverview(ctx context.Context) (*overviewData, error) {
	st, err := h.ob.Stats(ctx)
	if err != nil {
		return nil, err
	}
	d := &overviewData{Oldest: st.OldestPending, WebhookAddr: h.opts.WebhookAddr}
	// The pending intents through their partial index, whatever the
	// statistics say (see planguard.Run).
	if err := planguard.Run(ctx, h.pool, func(tx pgx.Tx) error {
		due, err := store.PageReadDue(ctx, tx)
		d.Due, d.Scheduled, d.NextScheduled, d.LastEvent = due.Due, due.Scheduled, due.NextScheduled, due.LastEvent
		return err
	}); err != nil {
		return nil, fmt.Errorf("outboxui: due and scheduled: %w", err)
	}
	for _, s := range outbox.States {
		d.States = append(d.States, count{Name: string(s), N: st.Counts[s], Class: stateClass(s)})
	}
	for _, s := range outbox.DeliveryStatuses {
		d.Deliveries = append(d.Deliveries, count{Name: string(s), N: st.Deliveries[s]})
	}
	if d.Chart, err = h.sendsPerMinute(ctx); err != nil {
		return nil, err
	}
	budgets, err := budget.Read(ctx, h.pool)
	if err != nil {
		return nil, err
	}
	for _, b := range budgets {
		d.Budgets = append(d.Budgets, budgetRow{Key: b.KeyFingerprint, Line: b.Describe(), Paused: b.PausedFor > 0 || b.QuotaExhausted()})
	}
	if d.Health, err = h.readHealth(ctx, d.Due, budgets); err != nil {
		return nil, err
	}
	runs, err := h.ob.Runs(ctx, &outbox.RunListParams{Limit: 10})
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		d.Runs = append(d.Runs, runRow{Key: r.Key, State: r.State, Sent: r.Counts[outbox.StateSent],
			Pending: r.Counts[outbox.StatePending] + r.Counts[outbox.StateSending], Failed: r.Counts[outbox.StateFailed],
			Total: r.Total, Minute: r.SentLastMinute, Left: r.Left()})
		if r.State == outbox.RunPaused && r.Breaker != nil {
			d.Runs[len(d.Runs)-1].Breaker = r.Breaker.Reason
		}
	}
	if d.Failures, err = h.recentFailures(ctx); err != nil {
		return nil, err
	}
	if d.Workers, err = h.workers(ctx); err != nil {
		return nil, err
	}
	if d.Unsubscribes, err = h.ob.UnsubscribesByTopic(ctx); err != nil {
		return nil, err
	}
	if d.Tenants, err = h.readTenants(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// recentFailures groups the intents that failed in the last day by error.
func (h *Handler) recentFailures(ctx context.Context) ([]failureGroup, error) {
	groups, err := store.PageReadRecentFailures(ctx, h.pool)
	if err != nil {
		return nil, fmt.Errorf("outboxui: recent failures: %w", err)
	}
	out := make([]failureGroup, len(groups))
	for i, g := range groups {
		out[i] = failureGroup(g)
	}
	return out, nil
}
