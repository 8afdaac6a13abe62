-- +goose Up
-- Status callbacks (issue 47, step 1): the application is told of each
-- transition of an intent in the transaction that records it, so that its
-- own writes (invoices.emailed_at) commit with the transition or not at
-- all.
--
-- The transitions: into a final state of the send (sent, failed,
-- suppressed, canceled), and into a delivery status the webhooks report
-- (delivered, bounced, complained). A statement that moves a row to the
-- state or status it had already (a second record of one answer, a second
-- "delivered" event) is no transition.
CREATE TYPE sendonce_status AS (
    transition      text,  -- sent, failed, suppressed, canceled, delivered, bounced, complained
    idempotency_key text,
    kind            text,
    run_key         text,  -- NULL outside a run
    tenant          text,  -- '' for the default tenant
    tags            jsonb, -- the payload's "tags" object, or NULL
    message_id      text   -- '' before one is recorded
);

-- sendonce_status_changes is the statement trigger of both ways to be
-- told: with the argument 'capture', it appends the statement's
-- transitions, as a JSON array, to the transaction's setting
-- sendonce.statuses, which a Go status hook's recorder reads back before
-- it commits (only while the transaction set sendonce.capture to 'on':
-- see the trigger's WHEN); with 'call', it calls the application's
-- function sendonce_on_status(sendonce_status) once for each (the SQL
-- interface, on once sendonce_status_hook_enable() has made its trigger).
-- One query over the statement's transition tables, which the tallies'
-- trigger makes PostgreSQL keep already.
-- +goose StatementBegin
CREATE FUNCTION sendonce_status_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    s sendonce_status[];
BEGIN
    SELECT array_agg(ROW(t.transition, n.idempotency_key, n.kind, n.run_key, coalesce(n.tenant, ''),
            CASE WHEN jsonb_typeof(n.payload -> 'tags') = 'object' THEN n.payload -> 'tags' END,
            coalesce(n.message_id, ''))::sendonce_status ORDER BY n.id, t.rank)
        INTO s
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    CROSS JOIN LATERAL (VALUES
        (1, CASE WHEN n.state IS DISTINCT FROM o.state AND n.state IN ('sent', 'failed', 'suppressed', 'canceled') THEN n.state END),
        (2, CASE WHEN n.delivery_status IS DISTINCT FROM o.delivery_status
            AND n.delivery_status IN ('delivered', 'bounced', 'complained') THEN n.delivery_status END)) AS t(rank, transition)
    WHERE t.transition IS NOT NULL;
    IF s IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_ARGV[0] = 'capture' THEN
        PERFORM set_config('sendonce.statuses',
            (coalesce(nullif(current_setting('sendonce.statuses', true), ''), '[]')::jsonb || to_jsonb(s))::text, true);
    ELSE
        PERFORM sendonce_on_status(x) FROM unnest(s) AS x;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER sendonce_outbox_status_capture AFTER UPDATE ON sendonce_outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT WHEN (current_setting('sendonce.capture', true) = 'on')
    EXECUTE FUNCTION sendonce_status_changes('capture');

-- The SQL interface: the application defines
--   sendonce_on_status(s sendonce_status) RETURNS void
-- and calls sendonce_status_hook_enable() once (as a role that owns
-- sendonce_outbox, as migrations run); from then on every statement that
-- records transitions calls it, in its transaction, once for each. An
-- error it raises rolls the statement back. sendonce_status_hook_disable()
-- turns it off. Off, it costs nothing: there is no trigger.
-- +goose StatementBegin
CREATE FUNCTION sendonce_status_hook_enable() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regprocedure('sendonce_on_status(sendonce_status)') IS NULL THEN
        RAISE EXCEPTION 'sendonce: define the function sendonce_on_status(sendonce_status) before enabling the status hook';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'sendonce_outbox'::regclass AND tgname = 'sendonce_outbox_status_hook') THEN
        CREATE TRIGGER sendonce_outbox_status_hook AFTER UPDATE ON sendonce_outbox
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION sendonce_status_changes('call');
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION sendonce_status_hook_disable() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DROP TRIGGER IF EXISTS sendonce_outbox_status_hook ON sendonce_outbox;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS sendonce_outbox_status_hook ON sendonce_outbox;
DROP TRIGGER IF EXISTS sendonce_outbox_status_capture ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_status_hook_disable();
DROP FUNCTION IF EXISTS sendonce_status_hook_enable();
DROP FUNCTION IF EXISTS sendonce_status_changes();
DROP TYPE IF EXISTS sendonce_status;
