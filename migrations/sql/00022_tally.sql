-- +goose Up
-- Reads whose cost does not grow with history (issue 26).
--
-- sendonce_outbox_tally and sendonce_run_tally hold the outbox's counts by
-- state and delivery status as deltas: every statement that inserts,
-- updates or deletes outbox rows appends, from a statement-level trigger
-- over its transition tables, one row per (bucket, state, delivery status)
-- whose count it changed (a mark of 100 sends appends two: sending -100,
-- sent +100). Nothing is updated in place, so no two writers wait on one
-- counter row and no lock order can deadlock a producer's transaction; the
-- deltas are part of the statement's transaction, so a count read from them
-- is exact (as of the reader's snapshot), like a count(*). Compaction
-- (sendonce_tally_compact, from the sweeper) folds the deltas into one row
-- per group, so a read sums a few hundred rows at any table size.
--
-- minute (outbox) is the minute of sent_at for a sent row, kept for two
-- hours (the sends-per-minute chart reads the last hour), then folded into
-- NULL; at (run) is the second of sent_at for a sent member, kept for two
-- minutes (a run's sends of the last minute), then folded into NULL.
-- delivery_status is '' where the row has none.
CREATE TABLE sendonce_outbox_tally (
    minute          timestamptz,
    state           text NOT NULL,
    delivery_status text NOT NULL,
    n               bigint NOT NULL
) WITH (autovacuum_vacuum_threshold = 500, autovacuum_vacuum_scale_factor = 0);

CREATE TABLE sendonce_run_tally (
    run_key         text NOT NULL,
    at              timestamptz,
    state           text NOT NULL,
    delivery_status text NOT NULL,
    n               bigint NOT NULL
) WITH (autovacuum_vacuum_threshold = 500, autovacuum_vacuum_scale_factor = 0);

CREATE INDEX sendonce_run_tally_run_key_idx ON sendonce_run_tally (run_key);

-- sendonce_outbox_tally appends the deltas of one statement, read from its
-- transition tables (new_rows, old_rows): the cost is per statement and per
-- changed row in memory, with one or two rows written per statement.
-- +goose StatementBegin
CREATE FUNCTION sendonce_outbox_tally() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT CASE WHEN state = 'sent' THEN date_trunc('minute', sent_at) END, state, coalesce(delivery_status, ''), count(*)
        FROM new_rows GROUP BY 1, 2, 3;
        INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT run_key, CASE WHEN state = 'sent' THEN date_trunc('second', sent_at) END, state, coalesce(delivery_status, ''), count(*)
        FROM new_rows WHERE run_key IS NOT NULL GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT CASE WHEN state = 'sent' AND sent_at > now() - interval '2 hours' THEN date_trunc('minute', sent_at) END,
            state, coalesce(delivery_status, ''), -count(*)
        FROM old_rows GROUP BY 1, 2, 3;
        INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT run_key, CASE WHEN state = 'sent' AND sent_at > now() - interval '2 minutes' THEN date_trunc('second', sent_at) END,
            state, coalesce(delivery_status, ''), -count(*)
        FROM old_rows WHERE run_key IS NOT NULL GROUP BY 1, 2, 3, 4;
    ELSE
        -- Most updates change no state (a job id given, a trace written):
        -- rows whose (state, delivery status, sent_at, run key) did not
        -- change cancel out and append nothing.
        INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT m, s, d, sum(k) FROM (
            SELECT CASE WHEN state = 'sent' THEN date_trunc('minute', sent_at) END AS m, state AS s, coalesce(delivery_status, '') AS d, 1 AS k FROM new_rows
            UNION ALL
            SELECT CASE WHEN state = 'sent' THEN date_trunc('minute', sent_at) END, state, coalesce(delivery_status, ''), -1 FROM old_rows) c
        GROUP BY 1, 2, 3 HAVING sum(k) <> 0;
        INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT r, a, s, d, sum(k) FROM (
            SELECT run_key AS r, CASE WHEN state = 'sent' THEN date_trunc('second', sent_at) END AS a, state AS s, coalesce(delivery_status, '') AS d, 1 AS k
            FROM new_rows WHERE run_key IS NOT NULL
            UNION ALL
            SELECT run_key, CASE WHEN state = 'sent' THEN date_trunc('second', sent_at) END, state, coalesce(delivery_status, ''), -1
            FROM old_rows WHERE run_key IS NOT NULL) c
        GROUP BY 1, 2, 3, 4 HAVING sum(k) <> 0;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION sendonce_outbox_tally_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM sendonce_outbox_tally;
    DELETE FROM sendonce_run_tally;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- sendonce_tally_compact folds the deltas into one row per group (minutes
-- older than two hours and seconds older than two minutes into NULL, groups
-- that sum to zero dropped) and returns how many rows it folded. Each fold
-- deletes the rows it read and inserts their sums in one statement: deltas
-- appended meanwhile are not among them and stay, and a concurrent fold
-- skips the rows this one deleted, so any number may run at once.
-- +goose StatementBegin
CREATE FUNCTION sendonce_tally_compact() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    a bigint;
    b bigint;
BEGIN
    WITH d AS (DELETE FROM sendonce_outbox_tally RETURNING *),
    i AS (INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT CASE WHEN minute > now() - interval '2 hours' THEN minute END, state, delivery_status, sum(n)
        FROM d GROUP BY 1, 2, 3 HAVING sum(n) <> 0)
    SELECT count(*) INTO a FROM d;
    WITH d AS (DELETE FROM sendonce_run_tally RETURNING *),
    i AS (INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT run_key, CASE WHEN at > now() - interval '2 minutes' THEN at END, state, delivery_status, sum(n)
        FROM d GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0)
    SELECT count(*) INTO b FROM d;
    RETURN a + b;
END
$$;
-- +goose StatementEnd

-- Seed the tallies from the table as it stands, with writers held off
-- until the triggers are in place.
LOCK TABLE sendonce_outbox IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER sendonce_outbox_tally_insert AFTER INSERT ON sendonce_outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION sendonce_outbox_tally();
CREATE TRIGGER sendonce_outbox_tally_update AFTER UPDATE ON sendonce_outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION sendonce_outbox_tally();
CREATE TRIGGER sendonce_outbox_tally_delete AFTER DELETE ON sendonce_outbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION sendonce_outbox_tally();
CREATE TRIGGER sendonce_outbox_tally_truncate AFTER TRUNCATE ON sendonce_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION sendonce_outbox_tally_truncate();

INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
SELECT CASE WHEN state = 'sent' AND sent_at > now() - interval '2 hours' THEN date_trunc('minute', sent_at) END,
    state, coalesce(delivery_status, ''), count(*)
FROM sendonce_outbox GROUP BY 1, 2, 3;
INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
SELECT run_key, CASE WHEN state = 'sent' AND sent_at > now() - interval '2 minutes' THEN date_trunc('second', sent_at) END,
    state, coalesce(delivery_status, ''), count(*)
FROM sendonce_outbox WHERE run_key IS NOT NULL GROUP BY 1, 2, 3, 4;

-- The unsettled members of runs, by run: prune asks whether a run has one
-- for each candidate (it read every pending member per row without it), and
-- a run's progress does not need it.
CREATE INDEX sendonce_outbox_run_unsettled_idx ON sendonce_outbox (run_key)
    WHERE run_key IS NOT NULL AND state IN ('pending', 'sending');

-- The failed intents by their last update: the page's recent failures read
-- a day of them, not the table.
CREATE INDEX sendonce_outbox_failed_idx ON sendonce_outbox (updated_at) WHERE state = 'failed';

-- +goose Down
DROP INDEX sendonce_outbox_failed_idx;
DROP INDEX sendonce_outbox_run_unsettled_idx;
DROP TRIGGER sendonce_outbox_tally_truncate ON sendonce_outbox;
DROP TRIGGER sendonce_outbox_tally_delete ON sendonce_outbox;
DROP TRIGGER sendonce_outbox_tally_update ON sendonce_outbox;
DROP TRIGGER sendonce_outbox_tally_insert ON sendonce_outbox;
DROP FUNCTION sendonce_tally_compact();
DROP FUNCTION sendonce_outbox_tally_truncate();
DROP FUNCTION sendonce_outbox_tally();
DROP TABLE sendonce_run_tally;
DROP TABLE sendonce_outbox_tally;
