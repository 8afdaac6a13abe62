-- +goose Up
-- The send budget's answers to issue 22.
--
-- probe_until:     a Retry-After longer than the workers' max pause
--                  (--max-pause) pauses the fleet for the max pause only
--                  (paused_until); from then until probe_until, the end of
--                  the wait the API asked for, the fleet sends single
--                  requests (probes), one a second at most, until the API
--                  serves one.
-- ceiling_seen_at: when a worker configured with the rate in ceiling last
--                  leased. The ceiling is the most generous rate a worker
--                  configured within the last minute: a worker started with
--                  a lower --api-rate paces its own sends and no longer
--                  lowers the rate every other worker leases from.
--
-- Columns with a constant default are added without rewriting the table.
ALTER TABLE sendonce_rate_budget
    ADD COLUMN IF NOT EXISTS probe_until timestamptz NOT NULL DEFAULT 'epoch',
    ADD COLUMN IF NOT EXISTS ceiling_seen_at timestamptz NOT NULL DEFAULT 'epoch';

-- +goose Down
ALTER TABLE sendonce_rate_budget DROP COLUMN IF EXISTS probe_until, DROP COLUMN IF EXISTS ceiling_seen_at;
