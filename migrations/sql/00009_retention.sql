-- +goose NO TRANSACTION
-- +goose Up
-- Retention (issue 17): settled intents older than a retention are deleted
-- (`sendonce prune`, `sendonce work --retain`), and each leaves a tombstone
-- that keeps its key's promise for a longer retention: enqueueing the key
-- again is the existing intent (same payload) or a key-reuse error (another
-- payload), never a second send.
--
-- The statements run outside a transaction so that the index on
-- sendonce_event is built CONCURRENTLY. Each can run again, should the
-- migration stop half-way.

-- The 16 bytes a tombstone keeps of a key: the first half of its SHA-256.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_key_hash(k text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT substring(sha256(convert_to(k, 'UTF8')) FROM 1 FOR 16)
$$;
-- +goose StatementEnd

-- The 16 bytes a tombstone keeps of what was sent: the first half of the
-- SHA-256 of [kind, template_id, payload] as jsonb text. Enqueue counts two
-- intents the same when kind and template are equal and the payloads are
-- equal as jsonb (key order and spacing aside); jsonb's text is the same
-- for such payloads. (Two numbers equal as jsonb but written differently,
-- 1.0 and 1.00, hash apart: such an enqueue is refused as a key reuse
-- instead of answered as the existing intent. Nothing is sent twice.)
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_intent_hash(kind text, template_id text, payload jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(sha256(convert_to(jsonb_build_array(kind, template_id, payload)::text, 'UTF8')) FROM 1 FOR 16)
$$;
-- +goose StatementEnd

-- One row per pruned intent, about 100 bytes with its index (README,
-- "Retention"). state is the intent's final state. Tombstones are deleted
-- by pruned_at, oldest first: rows go in in that order, so a BRIN index
-- (a few pages for millions of rows) finds the old ones.
CREATE TABLE IF NOT EXISTS sendonce_tombstone (
    key_hash    bytea       PRIMARY KEY,
    intent_hash bytea       NOT NULL,
    state       text        NOT NULL,
    pruned_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sendonce_tombstone_pruned_at_idx ON sendonce_tombstone USING brin (pruned_at);

-- A pruned intent's events go with it; they are found by intent.
DROP INDEX CONCURRENTLY IF EXISTS sendonce_event_intent_id_idx;
CREATE INDEX CONCURRENTLY sendonce_event_intent_id_idx ON sendonce_event (intent_id)
    WHERE intent_id IS NOT NULL;

-- The plain-SQL contract: a row inserted without a job (by a producer in
-- another language) whose key was pruned is skipped when it is the same
-- intent, as ON CONFLICT DO NOTHING skips a live one, and refused with a
-- key-reuse error naming the key when it is not. (The Go API leaves such
-- keys out of its own INSERT and answers them itself.)
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_outbox_tombstone() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    h bytea;
BEGIN
    SELECT intent_hash INTO h FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash(NEW.idempotency_key);
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF h = sendonce_intent_hash(NEW.kind, NEW.template_id, NEW.payload) THEN
        IF TG_WHEN = 'AFTER' THEN
            -- Raced a prune (see below): take the row back.
            DELETE FROM sendonce_outbox WHERE id = NEW.id;
        END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'sendonce: idempotency key % is already used by an intent with a different kind, template or payload (idempotency_key_reuse; the intent was pruned)',
        quote_literal(NEW.idempotency_key) USING ERRCODE = 'unique_violation';
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS sendonce_outbox_tombstone ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_tombstone
    BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL)
    EXECUTE FUNCTION sendonce_outbox_tombstone();

-- The same check once more after the row is in: an insert that began while
-- a prune of its key was committing waited for the prune on the key's
-- unique index, then went in. By then the tombstone is committed, and this
-- check (a new snapshot, under READ COMMITTED) sees it.
DROP TRIGGER IF EXISTS sendonce_outbox_tombstone_after ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_tombstone_after
    AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL)
    EXECUTE FUNCTION sendonce_outbox_tombstone();

-- Autovacuum for a queue table. Rows are inserted, rewritten twice (claim,
-- mark) and, with retention, deleted: dead versions pile up at the rate of
-- sends, and with the default scale factor (20% of the table) a table of
-- 30 days of sends would be vacuumed after 6 days' worth of dead rows. Here:
-- vacuum after 1% of the rows are dead or 1% more were inserted (so the
-- visibility map, and index-only scans, keep up), analyze after 2% changed
-- (the unsettled index's estimates swing with the backlog), and a cost
-- limit of 2,000 (ten times the default) so a vacuum keeps up with the
-- pruning instead of sleeping most of the time.
ALTER TABLE sendonce_outbox SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_limit = 2000
);

-- +goose Down
ALTER TABLE sendonce_outbox RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold,
    autovacuum_vacuum_cost_limit
);
DROP TRIGGER IF EXISTS sendonce_outbox_tombstone_after ON sendonce_outbox;
DROP TRIGGER IF EXISTS sendonce_outbox_tombstone ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_outbox_tombstone();
DROP INDEX CONCURRENTLY IF EXISTS sendonce_event_intent_id_idx;
DROP TABLE IF EXISTS sendonce_tombstone;
DROP FUNCTION IF EXISTS sendonce_intent_hash(text, text, jsonb);
DROP FUNCTION IF EXISTS sendonce_key_hash(text);
