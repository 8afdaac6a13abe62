-- +goose Up
-- The send budget's answers to issue 23: a 429 lowers the fleet's rate
-- only when it is evidence that the fleet is over the API's limit.
--
-- recent_requests: the requests the fleet was given tokens for lately, a
--                  count that decays by half every two seconds (as of
--                  recent_at).
-- recent_refusals: the 429s of intents that had not met one before, the
--                  same way. A 429 is a fleet signal when the refusals are
--                  at least 1% of the requests; an intent that keeps
--                  meeting 429 while others pass backs off on its own and
--                  is not counted again.
--
-- Columns with a constant default are added without rewriting the table.
ALTER TABLE sendonce_rate_budget
    ADD COLUMN IF NOT EXISTS recent_requests double precision NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS recent_refusals double precision NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS recent_at timestamptz NOT NULL DEFAULT 'epoch';

-- +goose Down
ALTER TABLE sendonce_rate_budget DROP COLUMN IF EXISTS recent_requests, DROP COLUMN IF EXISTS recent_refusals,
    DROP COLUMN IF EXISTS recent_at;
