-- +goose Up
-- The drain's claim appends nothing to the tallies (issue 44's lean table).
--
-- Every UPDATE of the outbox runs the tally's statement trigger, and its
-- two INSERT … SELECTs over the transition tables took about a tenth of
-- the server's CPU time in a loop of the drain's claim (50 intents a
-- statement) and mark (the backend's CPU time for 20,000 intents: 102-117
-- ticks of 10 ms with the trigger, 92-106 with it off; capturing the
-- transition tables alone costs nothing measurable, and appending the
-- deltas from the claim statement itself, through a CTE, cost as much as
-- the trigger). In `bench -only drain -runs 3` (20,000 intents, c=500) the
-- gain is within the noise: the drain's database CPU per intent measured
-- 0.77× and 0.78× River + client's in two runs against 0.78× and 0.79×
-- before them, alternated (55-56 µs against 56-58 µs).
--
-- A claim moves pending to sending and nothing else the tallies count, so
-- the tallies now count pending and sending together, under 'pending' (the
-- unsettled intents): the claim, and every move between the two (a retry
-- recorded, an orphan released, a lapsed worker's intent rescued), changes
-- no tallied count, and the trigger returns at once when every row it sees,
-- before and after, is unsettled with no delivery status. The readers
-- (outbox.Stats, the runs' progress) count the sending intents of the table
-- in the same statement, a few rows through the partial index of unsettled
-- intents, and take them from the unsettled count: as exact as before.
--
-- The early return also needs every row's run key to stay the same, which
-- the statement trigger cannot see without matching old and new rows: a
-- row trigger on UPDATE OF run_key, which no hot statement's SET list
-- names (so it costs them nothing), notes a moved run key for the rest of
-- the transaction (sendonce.run_key_moved), and the trigger then counts
-- in full.
--
-- The mark (sending to sent) still appends its two rows per statement: the
-- sent intents and their minutes are counted nowhere else. Neither the
-- claim nor the mark can be a HOT update: each changes state, which the due
-- index's predicate names (and the mark message_id, which its index holds).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_outbox_tally() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT CASE WHEN state = 'sent' THEN date_trunc('minute', sent_at) END,
            CASE WHEN state = 'sending' THEN 'pending' ELSE state END, coalesce(delivery_status, ''), count(*)
        FROM new_rows GROUP BY 1, 2, 3;
        INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT run_key, CASE WHEN state = 'sent' THEN date_trunc('second', sent_at) END,
            CASE WHEN state = 'sending' THEN 'pending' ELSE state END, coalesce(delivery_status, ''), count(*)
        FROM new_rows WHERE run_key IS NOT NULL GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT CASE WHEN state = 'sent' AND sent_at > now() - interval '2 hours' THEN date_trunc('minute', sent_at) END,
            CASE WHEN state = 'sending' THEN 'pending' ELSE state END, coalesce(delivery_status, ''), -count(*)
        FROM old_rows GROUP BY 1, 2, 3;
        INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT run_key, CASE WHEN state = 'sent' AND sent_at > now() - interval '2 minutes' THEN date_trunc('second', sent_at) END,
            CASE WHEN state = 'sending' THEN 'pending' ELSE state END, coalesce(delivery_status, ''), -count(*)
        FROM old_rows WHERE run_key IS NOT NULL GROUP BY 1, 2, 3, 4;
    ELSE
        -- The drain's claim, and any move between pending and sending:
        -- every row unsettled with no delivery status, before and after,
        -- and no run key moved in this transaction (see
        -- sendonce_outbox_run_key_moved), so no tallied count changed. Two
        -- scans that stop at the first row of any other kind.
        IF current_setting('sendonce.run_key_moved', true) IS DISTINCT FROM 'on'
            AND NOT EXISTS (SELECT 1 FROM new_rows WHERE state NOT IN ('pending', 'sending') OR delivery_status IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM old_rows WHERE state NOT IN ('pending', 'sending') OR delivery_status IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        -- Most other updates change no state either (a job id given, a
        -- trace written): rows whose (state, delivery status, sent_at, run
        -- key) did not change cancel out and append nothing.
        INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT m, s, d, sum(k) FROM (
            SELECT CASE WHEN state = 'sent' THEN date_trunc('minute', sent_at) END AS m,
                CASE WHEN state = 'sending' THEN 'pending' ELSE state END AS s, coalesce(delivery_status, '') AS d, 1 AS k FROM new_rows
            UNION ALL
            SELECT CASE WHEN state = 'sent' THEN date_trunc('minute', sent_at) END,
                CASE WHEN state = 'sending' THEN 'pending' ELSE state END, coalesce(delivery_status, ''), -1 FROM old_rows) c
        GROUP BY 1, 2, 3 HAVING sum(k) <> 0;
        INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT r, a, s, d, sum(k) FROM (
            SELECT run_key AS r, CASE WHEN state = 'sent' THEN date_trunc('second', sent_at) END AS a,
                CASE WHEN state = 'sending' THEN 'pending' ELSE state END AS s, coalesce(delivery_status, '') AS d, 1 AS k
            FROM new_rows WHERE run_key IS NOT NULL
            UNION ALL
            SELECT run_key, CASE WHEN state = 'sent' THEN date_trunc('second', sent_at) END,
                CASE WHEN state = 'sending' THEN 'pending' ELSE state END, coalesce(delivery_status, ''), -1
            FROM old_rows WHERE run_key IS NOT NULL) c
        GROUP BY 1, 2, 3, 4 HAVING sum(k) <> 0;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The compaction folds the sending rows appended before this migration
-- (and by a transaction that ran the old function across it) into pending.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_tally_compact() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    a bigint;
    b bigint;
BEGIN
    WITH d AS (DELETE FROM sendonce_outbox_tally RETURNING *),
    i AS (INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
        SELECT CASE WHEN minute > now() - interval '2 hours' THEN minute END,
            CASE WHEN state = 'sending' THEN 'pending' ELSE state END, delivery_status, sum(n)
        FROM d GROUP BY 1, 2, 3 HAVING sum(n) <> 0)
    SELECT count(*) INTO a FROM d;
    WITH d AS (DELETE FROM sendonce_run_tally RETURNING *),
    i AS (INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
        SELECT run_key, CASE WHEN at > now() - interval '2 minutes' THEN at END,
            CASE WHEN state = 'sending' THEN 'pending' ELSE state END, delivery_status, sum(n)
        FROM d GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0)
    SELECT count(*) INTO b FROM d;
    RETURN a + b;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION sendonce_outbox_run_key_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('sendonce.run_key_moved', 'on', true);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- A row trigger's event fires before the statement trigger's.
CREATE TRIGGER sendonce_outbox_run_key_moved AFTER UPDATE OF run_key ON sendonce_outbox
    FOR EACH ROW WHEN (OLD.run_key IS DISTINCT FROM NEW.run_key) EXECUTE FUNCTION sendonce_outbox_run_key_moved();

-- +goose Down
-- The old function counts pending and sending apart again: the unsettled
-- rows of the tallies are counted afresh from the table, with writers held
-- off meanwhile.
LOCK TABLE sendonce_outbox IN SHARE ROW EXCLUSIVE MODE;
DROP TRIGGER sendonce_outbox_run_key_moved ON sendonce_outbox;
DROP FUNCTION sendonce_outbox_run_key_moved();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_outbox_tally() RETURNS trigger
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
CREATE OR REPLACE FUNCTION sendonce_tally_compact() RETURNS bigint
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
DELETE FROM sendonce_outbox_tally WHERE state IN ('pending', 'sending');
INSERT INTO sendonce_outbox_tally (minute, state, delivery_status, n)
SELECT NULL, state, coalesce(delivery_status, ''), count(*)
FROM sendonce_outbox WHERE state IN ('pending', 'sending') GROUP BY 2, 3;
DELETE FROM sendonce_run_tally WHERE state IN ('pending', 'sending');
INSERT INTO sendonce_run_tally (run_key, at, state, delivery_status, n)
SELECT run_key, NULL, state, coalesce(delivery_status, ''), count(*)
FROM sendonce_outbox WHERE run_key IS NOT NULL AND state IN ('pending', 'sending') GROUP BY 1, 3, 4;
