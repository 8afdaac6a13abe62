-- +goose Up
-- Two holes in the plain-SQL contract (issue 22).
--
-- 1. A pruned key enqueued again in a REPEATABLE READ or SERIALIZABLE
-- transaction. The tombstone triggers of migration 00009 read
-- sendonce_tombstone in the transaction's snapshot. A prune of the key
-- that committed after the snapshot was taken deleted the key's row and
-- left a tombstone the snapshot cannot see: the INSERT went in (the old
-- row is gone from the unique index), the sweeper gave it a job, and the
-- intent was sent a second time. Under READ COMMITTED each statement has a
-- new snapshot and the triggers see the tombstone; this trigger runs only
-- under the other levels (the WHEN clause spares READ COMMITTED the call),
-- and refuses such an insert with a serialization failure (SQLSTATE
-- 40001), which a REPEATABLE READ or SERIALIZABLE producer retries anyway.
-- The retry's new snapshot sees the tombstone, and the triggers of 00009
-- answer it: skipped when it is the same intent, refused as a key reuse
-- when not.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_outbox_snapshot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The snapshot still shows a row under the key, yet the insert went
    -- in: that row was deleted (pruned) by a transaction that committed
    -- after the snapshot was taken. (A row the snapshot shows that is
    -- still there would have made the insert a unique violation.)
    IF EXISTS (SELECT 1 FROM sendonce_outbox WHERE idempotency_key = NEW.idempotency_key AND id <> NEW.id) THEN
        RAISE EXCEPTION 'sendonce: idempotency key % was pruned (or deleted) by a transaction that committed after this transaction''s snapshot was taken: roll back and retry the transaction',
            quote_literal(NEW.idempotency_key) USING ERRCODE = 'serialization_failure';
    END IF;
    -- The snapshot may predate the key's pruned intent itself, and show no
    -- row. A tombstone committed after the snapshot is found through the
    -- tombstones' primary key, which sees every committed row: an insert
    -- that conflicts with a row its REPEATABLE READ snapshot cannot see
    -- fails with "could not serialize access due to concurrent update"
    -- (SQLSTATE 40001). Where there is none, the probe row goes in and is
    -- deleted again at once, never committed.
    INSERT INTO sendonce_tombstone (key_hash, intent_hash, state)
        VALUES (sendonce_key_hash(NEW.idempotency_key), '\x'::bytea, 'probe') -- sendonce: the key was pruned by a transaction that committed after this transaction's snapshot was taken: roll back and retry the transaction
        ON CONFLICT (key_hash) DO NOTHING;
    DELETE FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash(NEW.idempotency_key) AND state = 'probe';
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER sendonce_outbox_snapshot
    AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL
        AND current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted'))
    EXECUTE FUNCTION sendonce_outbox_snapshot();

-- 2. A new member of a canceled run. EnqueueRun refuses it ("a canceled
-- run takes no new members"); a plain INSERT with run_key was accepted,
-- given a job by the sweeper and sent. This trigger gives plain SQL the
-- same rule and wording. A member already there passes, so that ON
-- CONFLICT DO NOTHING skips it, as EnqueueRun answers it Existing.
--
-- The run's row is locked FOR SHARE, which conflicts with CancelRun's lock
-- and update of it, so that of an insert and a concurrent CancelRun one
-- sees the other: an insert that comes second waits for the cancel to
-- commit and then reads the run canceled (under REPEATABLE READ it fails
-- with a serialization failure instead; its retry is refused); a cancel
-- that comes second waits for the insert's transaction, then cancels the
-- new member with the others.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_outbox_run_member() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    SELECT state INTO st FROM sendonce_run WHERE key = NEW.run_key FOR SHARE;
    -- No such run: the foreign key refuses the row.
    IF st = 'canceled' AND NOT EXISTS (SELECT 1 FROM sendonce_outbox WHERE idempotency_key = NEW.idempotency_key) THEN
        RAISE EXCEPTION 'sendonce: cannot enqueue into run %: it is canceled: a canceled run takes no new members',
            quote_literal(NEW.run_key) USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER sendonce_outbox_run_member
    BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NEW.run_key IS NOT NULL)
    EXECUTE FUNCTION sendonce_outbox_run_member();

-- +goose Down
DROP TRIGGER IF EXISTS sendonce_outbox_run_member ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_outbox_run_member();
DROP TRIGGER IF EXISTS sendonce_outbox_snapshot ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_outbox_snapshot();
