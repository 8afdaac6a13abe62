-- +goose Up
-- The send budget shared by every worker that sends with one API key: a
-- token bucket per API key fingerprint (never the key). Workers lease a few
-- tokens at a time, so the row is touched a few times a second, not once
-- per send.
--
-- ceiling:      the configured rate in requests per second (--api-rate);
--               NULL when the fleet finds the provider's limit from 429s.
-- rate:         the rate the fleet sends at now: at most the ceiling,
--               lowered on a 429 and raised again slowly; NULL while no
--               limit is configured and none has been met.
-- tokens:       what the bucket holds, at most one second of rate.
-- paused_until: no token is handed out before then (a Retry-After).
-- decreased_at: the last lowering, so a burst of 429s lowers it once.
CREATE TABLE sendonce_rate_budget (
    key_fingerprint text PRIMARY KEY,
    ceiling         double precision,
    rate            double precision,
    tokens          double precision NOT NULL DEFAULT 0,
    refilled_at     timestamptz NOT NULL DEFAULT now(),
    paused_until    timestamptz NOT NULL DEFAULT 'epoch',
    decreased_at    timestamptz NOT NULL DEFAULT 'epoch',
    throttles       bigint NOT NULL DEFAULT 0,
    CONSTRAINT sendonce_rate_budget_rate_check CHECK (rate IS NULL OR rate > 0),
    CONSTRAINT sendonce_rate_budget_ceiling_check CHECK (ceiling IS NULL OR ceiling > 0)
);

-- +goose Down
DROP TABLE sendonce_rate_budget;
