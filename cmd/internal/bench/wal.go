package bench

import (
	"context"
	"fmt"
)

// WAL is a position in PostgreSQL's write-ahead log, as pg_current_wal_lsn
// gives it ("0/1A2B3C4"). Every durable change is written there before it
// is flushed at commit, so the bytes written per job are what a path costs
// the disk and any replica, however fast the machine.
type WAL string

// ReadWAL reads the server's current WAL position.
func (e *Env) ReadWAL(ctx context.Context) (WAL, error) {
	var lsn string
	if err := e.Admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("bench: read WAL position: %w", err)
	}
	return WAL(lsn), nil
}

// WALSince is the WAL bytes written since an earlier position, by the whole
// server: on a server of your own, other databases' writes count too.
func (e *Env) WALSince(ctx context.Context, earlier WAL) (int64, error) {
	var n int64
	err := e.Admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", string(earlier)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("bench: WAL written: %w", err)
	}
	return n, nil
}
