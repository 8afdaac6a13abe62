-- +goose NO TRANSACTION
-- +goose Up
-- Suppression (issue 16): addresses that hard-bounced or complained are not
-- mailed again. The webhooks put them on sendonce_suppression; a worker
-- looks up an intent's recipients there when it first claims the intent,
-- before any API call, and parks an intent whose recipients are all
-- suppressed as 'suppressed'.
--
-- The statements run outside a transaction so that the widened state check
-- is validated without holding up enqueues (ADD … NOT VALID takes the
-- table's lock for a moment; VALIDATE reads the table under a lock that
-- lets writes go on). Each statement can run again.

-- One row per suppressed address, in the form sendonce_address gives
-- (lower case, the bare address of "Name <addr>"). reason: bounced or
-- complained (from this sender's own webhooks), api (the API's
-- email.suppressed or suppression.added events), manual (`sendonce
-- suppression add`). source: the webhook delivery that added it, or who
-- added it by hand.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_address(a text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT nullif(lower(btrim(coalesce(substring(a FROM '<([^<>]*)>\s*$'), a))), '')
$$;
-- +goose StatementEnd

CREATE TABLE IF NOT EXISTS sendonce_suppression (
    address    text        PRIMARY KEY,
    reason     text        NOT NULL,
    source     text,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sendonce_suppression_address_check
        CHECK (address = sendonce_address(address) AND address LIKE '_%@_%' AND length(address) <= 320),
    CONSTRAINT sendonce_suppression_reason_check
        CHECK (reason IN ('bounced', 'complained', 'api', 'manual'))
);

-- The addresses an email body sends to: to, cc and bcc, each a string or
-- an array of strings (the API's own forms).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_email_recipients(body jsonb) RETURNS SETOF text
LANGUAGE sql IMMUTABLE AS $$
    SELECT sendonce_address(r)
    FROM unnest(ARRAY['to', 'cc', 'bcc']) AS f,
        LATERAL jsonb_array_elements_text(CASE jsonb_typeof(body -> f)
            WHEN 'array' THEN body -> f
            WHEN 'string' THEN jsonb_build_array(body -> f)
            ELSE '[]'::jsonb END) AS r
$$;
-- +goose StatementEnd

-- The recipients of an intent: of its email (email, template), or of every
-- email of a batch. A broadcast goes to an audience the API keeps: none.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_recipients(kind text, payload jsonb) RETURNS SETOF text
LANGUAGE sql IMMUTABLE AS $$
    SELECT sendonce_email_recipients(payload) WHERE kind IN ('email', 'template')
    UNION ALL
    SELECT sendonce_email_recipients(e)
    FROM jsonb_array_elements(CASE WHEN kind = 'batch' AND jsonb_typeof(payload -> 'emails') = 'array'
        THEN payload -> 'emails' ELSE '[]'::jsonb END) AS e
$$;
-- +goose StatementEnd

-- The suppressed recipients of an intent, sorted, or NULL when none is.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_suppressed(kind text, payload jsonb) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT array_agg(DISTINCT s.address ORDER BY s.address)
    FROM sendonce_recipients(kind, payload) AS r
    JOIN sendonce_suppression s ON s.address = r
$$;
-- +goose StatementEnd

-- What the first claim found suppressed among the intent's recipients
-- (NULL: none, or not claimed yet). Every attempt sends the body without
-- them, so the body under the key never changes; an intent all of whose
-- recipients are suppressed is parked as suppressed.
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS suppressed_recipients text[];

ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_state_check,
    ADD CONSTRAINT sendonce_outbox_state_check
        CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'canceled', 'suppressed')) NOT VALID;
ALTER TABLE sendonce_outbox VALIDATE CONSTRAINT sendonce_outbox_state_check;

-- An event adds its addresses to the list (or, suppression.removed, takes
-- them off) once: suppression_applied records that it did.
ALTER TABLE sendonce_event ADD COLUMN IF NOT EXISTS suppression_applied boolean NOT NULL DEFAULT false;

-- sendonce_event_suppress applies one stored event to the suppression
-- list, at most once, and returns how many addresses it added or removed.
-- email.bounced (unless the event calls the bounce soft or transient),
-- email.complained, email.suppressed and suppression.added add addresses;
-- suppression.removed removes them. The event's payload beyond type and id
-- is undocumented: its addresses are data.to (a string or an array), or
-- else data.email, data.address or data.recipient; an email event without
-- any takes the recipients of the intent it matched (an email or a
-- template; until it matches, it waits, and sendonce_event_match applies
-- it then).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_suppress(p_delivery_id text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ev     sendonce_event;
    reason text;
    addrs  text[];
    n      integer := 0;
BEGIN
    -- Most events (delivered, opened, …) change nothing: they are not
    -- locked, only those that may change the list.
    reason := (SELECT CASE e.type
            WHEN 'email.bounced' THEN 'bounced'
            WHEN 'email.complained' THEN 'complained'
            WHEN 'email.suppressed' THEN 'api'
            WHEN 'suppression.added' THEN 'api'
            WHEN 'suppression.removed' THEN 'removed'
        END FROM sendonce_event e WHERE e.delivery_id = p_delivery_id);
    IF reason IS NULL THEN
        RETURN 0;
    END IF;
    SELECT * INTO ev FROM sendonce_event WHERE delivery_id = p_delivery_id FOR UPDATE;
    IF NOT FOUND OR ev.suppression_applied THEN
        RETURN 0;
    END IF;
    IF ev.type = 'email.bounced' AND lower(coalesce(ev.raw #>> '{data,bounce,type}',
            ev.raw #>> '{data,bounceType}', ev.raw #>> '{data,bounce_type}', '')) IN ('soft', 'transient', 'temporary') THEN
        RETURN 0;
    END IF;
    SELECT array_agg(DISTINCT a) INTO addrs FROM (
        SELECT sendonce_address(x) AS a
        FROM jsonb_array_elements_text(CASE jsonb_typeof(ev.raw #> '{data,to}')
            WHEN 'array' THEN ev.raw #> '{data,to}'
            WHEN 'string' THEN jsonb_build_array(ev.raw #> '{data,to}')
            ELSE '[]'::jsonb END) AS x
        UNION ALL
        SELECT sendonce_address(ev.raw -> 'data' ->> f)
        FROM unnest(ARRAY['email', 'address', 'recipient']) AS f
        WHERE jsonb_typeof(ev.raw -> 'data' -> f) = 'string'
    ) s WHERE a LIKE '_%@_%' AND length(a) <= 320;
    IF addrs IS NULL AND ev.type LIKE 'email.%' THEN
        IF ev.intent_id IS NULL THEN
            RETURN 0; -- applied when it matches its intent
        END IF;
        SELECT array_agg(DISTINCT r) INTO addrs
        FROM sendonce_outbox o, sendonce_recipients(o.kind, o.payload) AS r
        WHERE o.id = ev.intent_id AND o.kind IN ('email', 'template') AND r LIKE '_%@_%' AND length(r) <= 320;
    END IF;
    UPDATE sendonce_event SET suppression_applied = true WHERE delivery_id = p_delivery_id;
    IF addrs IS NULL THEN
        RETURN 0;
    END IF;
    IF reason = 'removed' THEN
        DELETE FROM sendonce_suppression WHERE address = ANY(addrs);
    ELSE
        INSERT INTO sendonce_suppression (address, reason, source)
        SELECT a, reason, 'webhook ' || ev.delivery_id FROM unnest(addrs) AS a
        ON CONFLICT (address) DO NOTHING;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- sendonce_event_match as in 00007, and it applies the event to the
-- suppression list once it knows the intent.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_match(p_delivery_id text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    ev     sendonce_event;
    intent bigint;
BEGIN
    SELECT * INTO ev FROM sendonce_event WHERE delivery_id = p_delivery_id;
    IF NOT FOUND OR ev.email_id IS NULL OR ev.intent_id IS NOT NULL THEN
        RETURN ev.intent_id;
    END IF;
    SELECT id INTO intent FROM sendonce_outbox WHERE message_id = ev.email_id ORDER BY id LIMIT 1;
    IF intent IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE sendonce_event SET intent_id = intent WHERE delivery_id = p_delivery_id;
    PERFORM sendonce_delivery_apply(intent, ev.type, ev.occurred_at);
    PERFORM sendonce_event_suppress(p_delivery_id);
    RETURN intent;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_match(p_delivery_id text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    ev     sendonce_event;
    intent bigint;
BEGIN
    SELECT * INTO ev FROM sendonce_event WHERE delivery_id = p_delivery_id;
    IF NOT FOUND OR ev.email_id IS NULL OR ev.intent_id IS NOT NULL THEN
        RETURN ev.intent_id;
    END IF;
    SELECT id INTO intent FROM sendonce_outbox WHERE message_id = ev.email_id ORDER BY id LIMIT 1;
    IF intent IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE sendonce_event SET intent_id = intent WHERE delivery_id = p_delivery_id;
    PERFORM sendonce_delivery_apply(intent, ev.type, ev.occurred_at);
    RETURN intent;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS sendonce_event_suppress(text);
ALTER TABLE sendonce_event DROP COLUMN IF EXISTS suppression_applied;
ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_state_check,
    ADD CONSTRAINT sendonce_outbox_state_check
        CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'canceled')) NOT VALID;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS suppressed_recipients;
DROP FUNCTION IF EXISTS sendonce_suppressed(text, jsonb);
DROP FUNCTION IF EXISTS sendonce_recipients(text, jsonb);
DROP FUNCTION IF EXISTS sendonce_email_recipients(jsonb);
DROP TABLE IF EXISTS sendonce_suppression;
DROP FUNCTION IF EXISTS sendonce_address(text);
