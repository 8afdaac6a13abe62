-- +goose NO TRANSACTION
-- +goose Up
-- Fair shares among tenants (issue 46, step 2): the drain's claim takes
-- due intents tenant by tenant, each tenant's share of the fleet's budget
-- in proportion to its weight, within each priority class.
--
-- The due index gains the tenant after the class: the claim asks for the
-- due intents of one tenant of one class at a time, in due order, and a
-- look at the tenants with intents pending steps through the index from
-- one (class, tenant) to the next, one probe each. '' is the default
-- tenant (NULL in the row). It replaces sendonce_outbox_due_idx: every
-- statement that read that one reads this one, so a row is in one due
-- index, as before. Built CONCURRENTLY, outside a transaction, so that
-- producers keep writing while it builds; each statement can run again,
-- should the migration stop half-way (an index left INVALID by a failed
-- build is dropped and built again).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'sendonce_outbox_tenant_due_idx' AND NOT i.indisvalid) THEN
        DROP INDEX sendonce_outbox_tenant_due_idx;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS sendonce_outbox_tenant_due_idx ON sendonce_outbox
    ((run_key IS NOT NULL), (coalesce(tenant, '')), (coalesce(next_attempt_at, send_at, created_at)), id)
    WHERE state = 'pending' AND job_id IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_due_idx;

-- A tenant's settings, and the counts its limits are kept with across the
-- fleet. A tenant without a row has weight 1 and no limits of its own;
-- `sendonce tenant set` writes the row, and workers read it again within
-- a second. The name is the intents' tenant, '' for the default tenant
-- (the commands say "default").
--
-- weight:      the tenant's share of the budget beside the others' with due
--              intents of the same class, 1 to 1000.
-- rate:        requests a second at most for the tenant's intents, NULL for
--              none; tokens and refilled_at are its bucket, a second's
--              worth at most, filled by the claim that takes one.
-- quota_day, quota_month: the tenant's intents first sent in a calendar
--              day or month (UTC) at most, NULL for none; day_count and
--              month_count count them from day_start and month_start.
CREATE TABLE IF NOT EXISTS sendonce_tenant (
    name        text PRIMARY KEY
        CONSTRAINT sendonce_tenant_name_check CHECK (name = '' OR (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$' AND name <> 'default')),
    weight      integer NOT NULL DEFAULT 1 CONSTRAINT sendonce_tenant_weight_check CHECK (weight BETWEEN 1 AND 1000),
    rate        double precision CONSTRAINT sendonce_tenant_rate_check CHECK (rate > 0 AND rate <= 1000000),
    quota_day   bigint CONSTRAINT sendonce_tenant_quota_day_check CHECK (quota_day >= 0),
    quota_month bigint CONSTRAINT sendonce_tenant_quota_month_check CHECK (quota_month >= 0),
    tokens      double precision NOT NULL DEFAULT 0,
    refilled_at timestamptz,
    day_start   timestamptz,
    day_count   bigint NOT NULL DEFAULT 0,
    month_start timestamptz,
    month_count bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- What each worker claimed in the last minute, by tenant, written with
-- its lease's renewal every ten seconds or so (no statement of its own):
-- a JSON object of tenant ('' the default tenant) to intents claimed, the
-- 100 tenants with the most, the rest summed under "*" (no tenant's
-- name). `sendonce tenants` and the page add up the live workers' to show
-- each tenant's share.
ALTER TABLE sendonce_worker ADD COLUMN IF NOT EXISTS tenants jsonb;

-- +goose Down
ALTER TABLE sendonce_worker DROP COLUMN IF EXISTS tenants;
DROP TABLE IF EXISTS sendonce_tenant;
CREATE INDEX CONCURRENTLY IF NOT EXISTS sendonce_outbox_due_idx ON sendonce_outbox
    ((run_key IS NOT NULL), (coalesce(next_attempt_at, send_at, created_at)), id)
    WHERE state = 'pending' AND job_id IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_tenant_due_idx;
