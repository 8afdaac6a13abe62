package outboxui

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// workerRow is a worker instance as the overview's workers panel shows it,
// from its liveness lease (sendonce_worker): what one needs in a crash or a
// pooler incident, such as which instance still holds its lease, which one
// leads River (and so runs its maintenance), and what each has in flight.
type workerRow struct {
	ID, Epoch  int32
	Host       string
	PID        int32
	Since      time.Time
	RenewedAgo time.Duration // since its last heartbeat
	// Lease is how the instance holds its liveness: "held" (renewed,
	// lease not past its end), "overdue" (not renewed past its lease: paused,
	// partitioned or dead, and no sweeper has ended it yet), "lapsed" (a
	// sweeper ended it and handed its sends on) or "stopped" (it stopped
	// gracefully).
	Lease   string
	EndedAt *time.Time
	Leader  bool  // its River client leads River (river_leader)
	Sending int64 // intents claimed under its lease and still sending
}

// recentlyEnded is how long the panel keeps showing an instance whose
// lease ended.
const recentlyEnded = time.Hour

// workers reads the instances holding a lease and those whose lease ended
// within recentlyEnded, live ones first.
func (h *Handler) workers(ctx context.Context) ([]workerRow, error) {
	rows, err := h.pool.Query(ctx, `
		SELECT w.id, w.epoch, w.host, w.pid, w.started_at,
			extract(epoch FROM now() - w.renewed_at)::float8,
			CASE WHEN w.ended_at IS NOT NULL THEN w.end_reason WHEN w.lease_until < now() THEN 'overdue' ELSE 'held' END,
			w.ended_at,
			w.ended_at IS NULL AND EXISTS (SELECT 1 FROM river_leader l WHERE l.leader_id = w.river_client_id AND l.expires_at > now()),
			coalesce(s.n, 0)
		FROM sendonce_worker w
		LEFT JOIN (SELECT claimed_by, count(*) AS n FROM sendonce_outbox WHERE state = 'sending' GROUP BY 1) s ON s.claimed_by = w.epoch
		WHERE w.ended_at IS NULL OR w.ended_at > now() - $1::float8 * interval '1 second'
		ORDER BY w.ended_at IS NOT NULL, w.started_at, w.id
		LIMIT 100`, recentlyEnded.Seconds())
	if err != nil {
		return nil, fmt.Errorf("outboxui: workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (workerRow, error) {
		var w workerRow
		var ago float64
		err := r.Scan(&w.ID, &w.Epoch, &w.Host, &w.PID, &w.Since, &ago, &w.Lease, &w.EndedAt, &w.Leader, &w.Sending)
		w.RenewedAgo = time.Duration(ago * float64(time.Second))
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxui: workers: %w", err)
	}
	return out, nil
}
