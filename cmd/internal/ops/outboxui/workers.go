package outboxui

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// workerRow is a worker instance as the overview's workers panel shows it,
// from its liveness lease (sendonce_worker, read by sendstate.Workers):
// what one needs in a crash or a pooler incident, such as which instance
// still holds its lease, which one leads River (and so runs its
// maintenance), and what each has in flight.
type workerRow struct {
	sendstate.WorkerLease
	// RenewedAgo is the time since its last heartbeat, by the database's
	// clock.
	RenewedAgo time.Duration
	// Sending counts the intents claimed under its lease and still sending.
	Sending int64
}

// maxEnded caps the instances with an ended lease the panel lists (after
// every live one): a fleet that restarts often ends many in a day.
const maxEnded = 20

// workers reads the fleet's instances, live ones first, and how many
// sends each has in flight.
func (h *Handler) workers(ctx context.Context) ([]workerRow, error) {
	leases, err := sendstate.Workers(ctx, h.pool)
	if err != nil {
		return nil, fmt.Errorf("outboxui: %w", err)
	}
	sending := map[int32]int64{}
	var now time.Time
	rows, err := store.PageReadSending(ctx, h.pool)
	if err != nil {
		return nil, fmt.Errorf("outboxui: sends in flight: %w", err)
	}
	for _, row := range rows {
		now = row.Now
		if row.Epoch != nil {
			sending[*row.Epoch] = row.N
		}
	}
	var out []workerRow
	ended := 0
	for _, l := range leases {
		if l.State == sendstate.LeaseStateLapsed || l.State == sendstate.LeaseStateStopped {
			if ended++; ended > maxEnded {
				continue
			}
		}
		out = append(out, workerRow{WorkerLease: l, RenewedAgo: now.Sub(l.RenewedAt), Sending: sending[l.Epoch]})
	}
	return out, nil
}
