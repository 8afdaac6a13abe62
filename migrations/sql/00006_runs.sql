-- +goose Up
-- Runs: a billing run or a broadcast, as one thing to schedule, watch,
-- pause and cancel. A run has a key derived from its cause
-- (billing:2026-12, digest:2026-12-07T07:00:00Z) and members: the intents
-- enqueued with its key in run_key.
--
-- state: active, paused (no member is claimed; sends in flight finish),
--        canceled (every member not yet attempted was canceled with it).
-- A run is done when no member is pending or sending; that is counted,
-- not stored.
CREATE TABLE sendonce_run (
    key           text        PRIMARY KEY,
    send_at       timestamptz,
    state         text        NOT NULL DEFAULT 'active',
    schedule_name text,
    occurrence    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sendonce_run_key_check CHECK (key ~ '^[A-Za-z0-9_.:-]{1,200}$'),
    CONSTRAINT sendonce_run_state_check CHECK (state IN ('active', 'paused', 'canceled'))
);

ALTER TABLE sendonce_outbox ADD COLUMN run_key text
    CONSTRAINT sendonce_outbox_run_key_fkey REFERENCES sendonce_run (key);
CREATE INDEX sendonce_outbox_run_key_idx ON sendonce_outbox (run_key) WHERE run_key IS NOT NULL;

-- A batch never mixes runs, so a canceled run cancels whole batches that
-- have not been attempted.
ALTER TABLE sendonce_batch DROP CONSTRAINT sendonce_batch_state_check;
ALTER TABLE sendonce_batch ADD CONSTRAINT sendonce_batch_state_check
    CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'split', 'canceled'));
ALTER TABLE sendonce_batch ADD COLUMN run_key text;

-- Recurring runs. Every occurrence of spec (cron fields and a time zone)
-- creates one run, keyed by the schedule's name and the occurrence's time
-- in UTC, from either a Go producer registered with the workers or a SQL
-- statement run with $1 = the run's key and $2 = the occurrence's time.
-- The workers create due occurrences in one transaction each, with the
-- schedule's row locked (SKIP LOCKED) and the run's key unique: however
-- many workers tick, and whatever crashes, an occurrence is created once.
--
-- missed: what happens to occurrences that fell due while no worker ran:
--         late (the latest of them is created when a worker starts, once)
--         or skip (only occurrences less than a minute late are created).
CREATE TABLE sendonce_schedule (
    name       text        PRIMARY KEY,
    spec       text        NOT NULL,
    producer   text,
    statement  text,
    missed     text        NOT NULL DEFAULT 'late',
    next_at    timestamptz NOT NULL,
    last_run   text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sendonce_schedule_name_check CHECK (name ~ '^[A-Za-z0-9_.-]{1,100}$'),
    CONSTRAINT sendonce_schedule_source_check CHECK ((producer IS NULL) <> (statement IS NULL)),
    CONSTRAINT sendonce_schedule_missed_check CHECK (missed IN ('late', 'skip'))
);

-- +goose Down
DROP TABLE sendonce_schedule;
ALTER TABLE sendonce_batch DROP COLUMN run_key;
ALTER TABLE sendonce_batch DROP CONSTRAINT sendonce_batch_state_check;
ALTER TABLE sendonce_batch ADD CONSTRAINT sendonce_batch_state_check
    CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'split'));
ALTER TABLE sendonce_outbox DROP COLUMN run_key;
DROP TABLE sendonce_run;
