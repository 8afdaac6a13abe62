-- +goose Up
-- Worker liveness as a lease row per worker instance, renewed by heartbeat
-- in short statements, so it works through any pooler (a session advisory
-- lock lives on whatever server connection a pooler gave it: it outlived
-- the worker behind PgBouncer, and idle_session_timeout could end it under
-- a live one).
--
-- id:              the instance, for as long as the process lives (from
--                  sendonce_worker_id_seq).
-- epoch:           the fencing token of the lease the instance holds now
--                  (from the same sequence, so no two leases of this
--                  database ever share one). Every claim records it in
--                  claimed_by, and every mark of a claimed intent requires
--                  claimed_by = epoch and the lease still held (ended_at
--                  NULL): a worker whose lease was taken from it records
--                  nothing. A worker that finds its lease ended while it
--                  lives takes a new epoch.
-- host, pid:       where the instance runs; river_client_id: its River
--                  client (river_leader.leader_id names the leader).
-- started_at:      when the instance started; renewed_at: its last
--                  heartbeat; lease_until: the lease's end by the
--                  database's clock (renewed_at + the lease length).
-- ended_at,        NULL while the lease is held. A sweeper that finds
-- end_reason:      lease_until passed ends it ('lapsed') and hands the
--                  intents claimed under it to new jobs; a graceful stop
--                  ends its own ('stopped'). Rows ended a day ago go.
CREATE TABLE sendonce_worker (
    id              integer PRIMARY KEY,
    epoch           integer NOT NULL UNIQUE,
    host            text NOT NULL,
    pid             integer NOT NULL,
    river_client_id text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    renewed_at      timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz NOT NULL,
    ended_at        timestamptz,
    end_reason      text CHECK (end_reason IN ('lapsed', 'stopped')),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);

-- +goose Down
DROP TABLE sendonce_worker;
