package outboxui

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
)

// chart is the sends per minute of the last hour, as the bars of an inline
// SVG: the oldest minute on the left, the current (partial) one on the
// right.
type chart struct {
	Width, Height float64
	Bars          []bar
	Max           int64
	Total         int64
	From, To      time.Time
}

type bar struct {
	X, Y, W, H float64
	N          int64
	Minute     time.Time
}

const (
	chartWidth  = 600
	chartHeight = 120
	chartBars   = 60
)

// sendsPerMinute counts the intents sent in each of the last 60 minutes of
// the database's clock, from their sent_at.
func (h *Handler) sendsPerMinute(ctx context.Context) (chart, error) {
	// From the per-minute buckets of the outbox's tally (see migration
	// 00022): no read of the table, whatever its size.
	ms, err := store.PageReadSendsPerMinute(ctx, h.pool)
	if err != nil {
		return chart{}, fmt.Errorf("outboxui: sends per minute: %w", err)
	}
	c := chart{Width: chartWidth, Height: chartHeight}
	for _, m := range ms {
		c.Max = max(c.Max, m.N)
		c.Total += m.N
	}
	if len(ms) > 0 {
		c.From, c.To = ms[0].At, ms[len(ms)-1].At
	}
	w := float64(chartWidth) / chartBars
	for i, m := range ms {
		hgt := 0.0
		if c.Max > 0 {
			hgt = float64(m.N) / float64(c.Max) * (chartHeight - 4)
		}
		if m.N > 0 && hgt < 1 {
			hgt = 1
		}
		c.Bars = append(c.Bars, bar{X: float64(i) * w, Y: chartHeight - hgt, W: w - 1, H: hgt, N: m.N, Minute: m.At})
	}
	return c, nil
}
