-- +goose NO TRANSACTION
-- +goose Up
-- Reconcile gives a new River job to an intent whose own job ended without
-- sending it: only intents with a River job of their own (job_id set, in no
-- batch) can be such, and since the drain (issue 44) those are the intents
-- of a database upgraded from an earlier release, if any. Its window read
-- every unsettled intent, drained ones included, 5,000 every few seconds
-- whatever the backlog; this index holds only the intents it can act on,
-- so on a drained outbox it is empty and the window costs nothing. Built
-- CONCURRENTLY: producers keep writing while it builds (an index left
-- INVALID by a failed build is dropped and built again).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'sendonce_outbox_jobbed_idx' AND NOT i.indisvalid) THEN
        DROP INDEX sendonce_outbox_jobbed_idx;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS sendonce_outbox_jobbed_idx ON sendonce_outbox (state, id)
    WHERE state IN ('pending', 'sending') AND job_id IS NOT NULL AND batch_key IS NULL;

-- +goose Down
DROP INDEX IF EXISTS sendonce_outbox_jobbed_idx;
