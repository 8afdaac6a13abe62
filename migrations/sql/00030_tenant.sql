-- +goose Up
-- Tenants (issue 46, step 1): whom an intent is sent for, so that a later
-- claim can share the fleet's budget fairly among them.
--
-- tenant: the customer of the application an intent is sent for ('acme',
--         '4192', 'acme.example'); NULL for the default tenant, the one of
--         every intent that names none (shown as "default"). NULL costs an
--         untenanted intent nothing to write, and every intent enqueued
--         before this migration is in the default tenant without a rewrite.
--         The rule (outbox.TenantPattern checks the same): 1 to 64 of
--         lowercase letters, digits, "_", "." and "-", starting with a
--         letter or a digit. Lowercase only, so that one tenant has one
--         spelling (Acme and acme would be two tenants, each with its own
--         share); a digit first and "." allowed, so that the ids
--         applications already have fit as they are (a customer number, a
--         UUID, a domain); 64 at most, to bound what the page, the
--         commands and a metric's label show. The literal 'default' is
--         refused: the default tenant is named by no tenant at all, and a
--         second spelling of it would be a second tenant.
--
-- The column comes without a default and its CHECK NOT VALID, as
-- 00025's queue did: every existing row is NULL, which passes, so the
-- migration rewrites and scans no table. New rows are checked.
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS tenant text;
ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_tenant_check,
    ADD CONSTRAINT sendonce_outbox_tenant_check
        CHECK (tenant ~ '^[a-z0-9][a-z0-9_.-]{0,63}$' AND tenant <> 'default') NOT VALID;

-- A run's tenant is its members': a member that names none takes the
-- run's, and one that names another is refused. A schedule's tenant is
-- the tenant of the runs it creates, and so of their members.
ALTER TABLE sendonce_run ADD COLUMN IF NOT EXISTS tenant text;
ALTER TABLE sendonce_run DROP CONSTRAINT IF EXISTS sendonce_run_tenant_check,
    ADD CONSTRAINT sendonce_run_tenant_check CHECK (tenant ~ '^[a-z0-9][a-z0-9_.-]{0,63}$' AND tenant <> 'default');
ALTER TABLE sendonce_schedule ADD COLUMN IF NOT EXISTS tenant text;
ALTER TABLE sendonce_schedule DROP CONSTRAINT IF EXISTS sendonce_schedule_tenant_check,
    ADD CONSTRAINT sendonce_schedule_tenant_check CHECK (tenant ~ '^[a-z0-9][a-z0-9_.-]{0,63}$' AND tenant <> 'default');

-- The members of a run inserted by SQL (plain-SQL producers, a schedule's
-- statement) get their run's tenant, or are refused for naming another.
-- outbox.EnqueueRun does the same in Go before it writes, and marks its
-- rows checked, which this trigger skips as the other producer triggers
-- do (00025). An UPDATE that moves a row into a run, or changes its
-- tenant, is held to the same rule.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_run_tenant() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    run_tenant text;
BEGIN
    SELECT r.tenant INTO run_tenant FROM sendonce_run r WHERE r.key = NEW.run_key;
    IF NOT FOUND THEN
        RETURN NEW; -- no such run: the foreign key refuses the row
    END IF;
    IF NEW.tenant IS NULL THEN
        NEW.tenant := run_tenant;
    ELSIF NEW.tenant IS DISTINCT FROM run_tenant THEN
        RAISE EXCEPTION 'sendonce: intent % names tenant %, but its run % is tenant %: a run''s members are its tenant''s (name none to take the run''s)',
            quote_literal(NEW.idempotency_key), quote_literal(NEW.tenant), quote_literal(NEW.run_key),
            quote_literal(coalesce(run_tenant, 'default'))
            USING ERRCODE = 'check_violation', CONSTRAINT = 'sendonce_outbox_run_tenant';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS sendonce_outbox_run_tenant ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_run_tenant BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.run_key IS NOT NULL AND NOT NEW.checked)
    EXECUTE FUNCTION sendonce_run_tenant();
DROP TRIGGER IF EXISTS sendonce_outbox_run_tenant_update ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_run_tenant_update BEFORE UPDATE OF run_key, tenant ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.run_key IS NOT NULL
        AND (OLD.run_key IS DISTINCT FROM NEW.run_key OR OLD.tenant IS DISTINCT FROM NEW.tenant))
    EXECUTE FUNCTION sendonce_run_tenant();

-- A run's tenant is set when it is created: its members have it already.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_run_tenant_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sendonce: cannot change the tenant of run % from % to %: a run''s tenant is set when it is created, and its members have it',
        quote_literal(OLD.key), quote_literal(coalesce(OLD.tenant, 'default')), quote_literal(coalesce(NEW.tenant, 'default'))
        USING ERRCODE = 'check_violation', CONSTRAINT = 'sendonce_run_tenant_fixed';
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS sendonce_run_tenant_fixed ON sendonce_run;
CREATE TRIGGER sendonce_run_tenant_fixed BEFORE UPDATE OF tenant ON sendonce_run
    FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant)
    EXECUTE FUNCTION sendonce_run_tenant_fixed();

-- +goose Down
DROP TRIGGER IF EXISTS sendonce_run_tenant_fixed ON sendonce_run;
DROP FUNCTION IF EXISTS sendonce_run_tenant_fixed();
DROP TRIGGER IF EXISTS sendonce_outbox_run_tenant_update ON sendonce_outbox;
DROP TRIGGER IF EXISTS sendonce_outbox_run_tenant ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_run_tenant();
ALTER TABLE sendonce_schedule DROP COLUMN IF EXISTS tenant;
ALTER TABLE sendonce_run DROP COLUMN IF EXISTS tenant;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS tenant;
