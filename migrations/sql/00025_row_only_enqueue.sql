-- +goose Up
-- Enqueue writes the intent's row only (issue 44): no River job per intent.
--
-- queue is the River queue whose workers' drains send the intent: a drain
-- claims the intents of its own queue only, as a River client works its
-- queue's jobs. Rows of plain-SQL producers take the default queue unless
-- they name one; the name follows River's rule for queue names.
--
-- checked is true on the rows outbox.EnqueueMany inserts: it has made, in
-- Go and in its own statement, every check the producer triggers below
-- make (the intent's form, the tombstones, the snapshot, a canceled run),
-- so they do not run again for those rows. The triggers used to tell the
-- two producers apart by job_id (a Go row came with its River job); now
-- both leave it NULL. A plain-SQL producer leaves checked false, its
-- default, and its rows are checked as before.
--
-- Adding columns with a constant default rewrites nothing; the CHECK is
-- added NOT VALID (every existing row holds the default, which passes), so
-- the migration scans no table.
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'sendonce',
    ADD COLUMN IF NOT EXISTS checked boolean NOT NULL DEFAULT false;
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'sendonce_outbox_queue_check') THEN
        ALTER TABLE sendonce_outbox ADD CONSTRAINT sendonce_outbox_queue_check
            CHECK (length(queue) <= 64 AND queue ~ '^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$') NOT VALID;
    END IF;
END
$$;
-- +goose StatementEnd

DROP TRIGGER sendonce_outbox_check ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_check BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked) EXECUTE FUNCTION sendonce_outbox_check();
DROP TRIGGER sendonce_outbox_notify ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_notify AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked) EXECUTE FUNCTION sendonce_outbox_notify();
DROP TRIGGER sendonce_outbox_run_member ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_run_member BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked AND NEW.run_key IS NOT NULL) EXECUTE FUNCTION sendonce_outbox_run_member();
DROP TRIGGER sendonce_outbox_snapshot ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_snapshot AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked
        AND current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted'))
    EXECUTE FUNCTION sendonce_outbox_snapshot();
DROP TRIGGER sendonce_outbox_tombstone ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_tombstone BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked) EXECUTE FUNCTION sendonce_outbox_tombstone();
DROP TRIGGER sendonce_outbox_tombstone_after ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_tombstone_after AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked) EXECUTE FUNCTION sendonce_outbox_tombstone();

-- +goose Down
DROP TRIGGER sendonce_outbox_check ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_check BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL) EXECUTE FUNCTION sendonce_outbox_check();
DROP TRIGGER sendonce_outbox_notify ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_notify AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL) EXECUTE FUNCTION sendonce_outbox_notify();
DROP TRIGGER sendonce_outbox_run_member ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_run_member BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NEW.run_key IS NOT NULL) EXECUTE FUNCTION sendonce_outbox_run_member();
DROP TRIGGER sendonce_outbox_snapshot ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_snapshot AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL
        AND current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted'))
    EXECUTE FUNCTION sendonce_outbox_snapshot();
DROP TRIGGER sendonce_outbox_tombstone ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_tombstone BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL) EXECUTE FUNCTION sendonce_outbox_tombstone();
DROP TRIGGER sendonce_outbox_tombstone_after ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_tombstone_after AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL) EXECUTE FUNCTION sendonce_outbox_tombstone();
ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_queue_check;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS queue, DROP COLUMN IF EXISTS checked;
