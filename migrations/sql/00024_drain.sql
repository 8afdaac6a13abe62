-- +goose NO TRANSACTION
-- +goose Up
-- The drain (issue 44): intents without a River job of their own (job_id
-- NULL) are claimed by the workers' drain loops in batches, in priority and
-- due order, and their retries live on the row.
--
-- next_attempt_at is when a drained intent that will be tried again is due
-- (the contract's backoff, or a Retry-After); NULL: due at send_at, or at
-- once. rate_limited is the intent's 429s in a row, which a per-intent
-- River job kept in its metadata. tries is what River's attempt number
-- was to a job: the claims whose attempt counted (a snooze, a send cut off
-- by a stop or a crash gives its try back), which MaxAttempts and the
-- backoff read; attempts still counts every claim. An intent is due at
-- coalesce(next_attempt_at, send_at, created_at): the index below serves
-- the drain's claim in that order, transactional intents (no run) before
-- bulk ones, and holds only the job-less pending intents.
--
-- Adding columns with a constant default rewrites nothing (PostgreSQL 11
-- and later); the index is built CONCURRENTLY, outside a transaction, so
-- that producers keep writing while it builds. Each statement can run
-- again, should the migration stop half-way (an index left INVALID by a
-- failed build is dropped and built again).
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
    ADD COLUMN IF NOT EXISTS rate_limited integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS tries integer NOT NULL DEFAULT 0;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'sendonce_outbox_due_idx' AND NOT i.indisvalid) THEN
        DROP INDEX sendonce_outbox_due_idx;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS sendonce_outbox_due_idx ON sendonce_outbox
    ((run_key IS NOT NULL), (coalesce(next_attempt_at, send_at, created_at)), id)
    WHERE state = 'pending' AND job_id IS NULL;

-- The due index holds the rows the old sweep found through
-- sendonce_outbox_unscheduled_idx (pending, no job), which nothing reads
-- now: one index fewer to write at every insert and claim of such a row.
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_unscheduled_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS sendonce_outbox_unscheduled_idx ON sendonce_outbox (id)
    WHERE job_id IS NULL AND state = 'pending';
DROP INDEX IF EXISTS sendonce_outbox_due_idx;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS next_attempt_at, DROP COLUMN IF EXISTS rate_limited,
    DROP COLUMN IF EXISTS tries;
