-- +goose NO TRANSACTION
-- +goose Up
-- Tracing (issue 17): the W3C trace context of the span that enqueued an
-- intent, so that the worker's send span, later and in another process, can
-- link to it. traceparent is the header's value
-- (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>), tracestate the
-- vendors' list that came with it; both NULL when the producer had no span.
-- Plain-SQL producers may set them too.
--
-- Adding nullable columns without a default rewrites nothing. The checks
-- are added NOT VALID and validated apart, outside a transaction, so that no
-- statement holds the table's exclusive lock while it reads the rows (all
-- NULL here). Each statement can run again, should the migration stop
-- half-way.
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS traceparent text, ADD COLUMN IF NOT EXISTS tracestate text;
ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_traceparent_check,
    ADD CONSTRAINT sendonce_outbox_traceparent_check
    CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_tracestate_check,
    ADD CONSTRAINT sendonce_outbox_tracestate_check CHECK (length(tracestate) <= 512) NOT VALID;
ALTER TABLE sendonce_outbox VALIDATE CONSTRAINT sendonce_outbox_traceparent_check;
ALTER TABLE sendonce_outbox VALIDATE CONSTRAINT sendonce_outbox_tracestate_check;

-- +goose Down
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS traceparent, DROP COLUMN IF EXISTS tracestate;
