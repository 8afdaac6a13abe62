-- +goose Up
-- The outbox: one row per send intent, written in the application's own
-- transaction. The idempotency key is what the OpenEmail API deduplicates on,
-- so it is unique here too and never changes once written.
CREATE TABLE sendonce_outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key  text        NOT NULL,
    kind             text        NOT NULL DEFAULT 'email',
    payload          jsonb       NOT NULL,
    template_id      text,
    send_at          timestamptz,
    state            text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    message_id       text,
    replayed         boolean     NOT NULL DEFAULT false,
    last_error       text,
    job_id           bigint,
    first_attempt_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    CONSTRAINT sendonce_outbox_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT sendonce_outbox_state_check
        CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'canceled')),
    CONSTRAINT sendonce_outbox_attempts_check CHECK (attempts >= 0)
);

-- The CLI lists by state, the metrics count by state and age the oldest
-- pending intent; the sweeper looks for rows that have no River job yet.
CREATE INDEX sendonce_outbox_state_created_at_idx ON sendonce_outbox (state, created_at);
CREATE INDEX sendonce_outbox_unscheduled_idx ON sendonce_outbox (id)
    WHERE job_id IS NULL AND state = 'pending';

-- sendonce_outbox_check validates a row the way the Go API does, so a
-- producer in another language that inserts with plain SQL gets the same
-- clear refusal instead of a row the worker can never send.
-- +goose StatementBegin
CREATE FUNCTION sendonce_outbox_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    item jsonb;
    n    integer := 0;
BEGIN
    IF NEW.idempotency_key IS NULL OR NEW.idempotency_key !~ '^[A-Za-z0-9_.:-]{1,255}$' THEN
        RAISE EXCEPTION 'sendonce: invalid idempotency_key %: want 1 to 255 characters of letters, digits, "_", ".", ":" and "-"',
            coalesce(quote_literal(left(NEW.idempotency_key, 60)), 'NULL')
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.kind IS NULL OR NEW.kind NOT IN ('email', 'batch', 'template', 'broadcast') THEN
        RAISE EXCEPTION 'sendonce: unknown kind %: want email, batch, template or broadcast',
            coalesce(quote_literal(NEW.kind), 'NULL') USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.payload IS NULL OR jsonb_typeof(NEW.payload) <> 'object' THEN
        RAISE EXCEPTION 'sendonce: payload must be a JSON object' USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length(NEW.payload::text) > 1048576 THEN
        RAISE EXCEPTION 'sendonce: payload is % bytes, over the 1 MiB limit', octet_length(NEW.payload::text)
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.payload ? 'scheduledAt' AND NEW.payload->'scheduledAt' <> 'null'::jsonb THEN
        IF jsonb_typeof(NEW.payload->'scheduledAt') <> 'string'
           OR NEW.payload->>'scheduledAt' !~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$'
           OR NOT sendonce_is_timestamp(NEW.payload->>'scheduledAt') THEN
            RAISE EXCEPTION 'sendonce: payload "scheduledAt" % is not an RFC 3339 time', left(NEW.payload->>'scheduledAt', 60)
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    IF NEW.kind = 'template' AND coalesce(NEW.template_id, '') = '' THEN
        RAISE EXCEPTION 'sendonce: kind template needs template_id' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.kind <> 'template' AND NEW.template_id IS NOT NULL THEN
        RAISE EXCEPTION 'sendonce: template_id is only for kind template' USING ERRCODE = 'check_violation';
    END IF;

    IF NEW.kind = 'batch' THEN
        IF jsonb_typeof(NEW.payload->'emails') IS DISTINCT FROM 'array' OR jsonb_array_length(NEW.payload->'emails') = 0 THEN
            RAISE EXCEPTION 'sendonce: batch payload needs a non-empty "emails" array' USING ERRCODE = 'check_violation';
        END IF;
        IF jsonb_array_length(NEW.payload->'emails') > 100 THEN
            RAISE EXCEPTION 'sendonce: batch payload has % emails, over the limit of 100', jsonb_array_length(NEW.payload->'emails')
                USING ERRCODE = 'check_violation';
        END IF;
        FOR item IN SELECT * FROM jsonb_array_elements(NEW.payload->'emails') LOOP
            PERFORM sendonce_check_email(item, format('emails[%s].', n), true);
            n := n + 1;
        END LOOP;
    ELSIF NEW.kind = 'email' THEN
        PERFORM sendonce_check_email(NEW.payload, '', true);
    ELSIF NEW.kind = 'template' THEN
        PERFORM sendonce_check_email(NEW.payload, '', false);
    ELSIF NEW.kind = 'broadcast' THEN
        IF coalesce(NEW.payload->>'from', '') = '' THEN
            RAISE EXCEPTION 'sendonce: broadcast payload needs "from"' USING ERRCODE = 'check_violation';
        END IF;
        IF coalesce(NEW.payload->>'subject', '') = '' THEN
            RAISE EXCEPTION 'sendonce: broadcast payload needs "subject"' USING ERRCODE = 'check_violation';
        END IF;
        IF coalesce(NEW.payload->>'html', '') = '' AND coalesce(NEW.payload->>'text', '') = '' THEN
            RAISE EXCEPTION 'sendonce: broadcast payload needs content: "html" or "text"' USING ERRCODE = 'check_violation';
        END IF;
        IF coalesce(NEW.payload->>'audienceId', '') = '' AND
           (jsonb_typeof(NEW.payload->'audienceIds') IS DISTINCT FROM 'array' OR jsonb_array_length(NEW.payload->'audienceIds') = 0) THEN
            RAISE EXCEPTION 'sendonce: broadcast payload needs "audienceId" or a non-empty "audienceIds"' USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- sendonce_is_timestamp reports whether a text casts to timestamptz.
-- +goose StatementBegin
CREATE FUNCTION sendonce_is_timestamp(t text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM t::timestamptz;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;
-- +goose StatementEnd

-- sendonce_check_email checks one email body: a sender, at least one
-- recipient (a string or an array of strings, as the API accepts them from
-- the SDKs) and, unless a template supplies it, some content.
-- +goose StatementBegin
CREATE FUNCTION sendonce_check_email(body jsonb, prefix text, needs_content boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    field text;
BEGIN
    IF jsonb_typeof(body) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'sendonce: %email must be a JSON object', prefix USING ERRCODE = 'check_violation';
    END IF;
    IF jsonb_typeof(body->'from') IS DISTINCT FROM 'string' OR body->>'from' = '' THEN
        RAISE EXCEPTION 'sendonce: payload needs "%from"', prefix USING ERRCODE = 'check_violation';
    END IF;
    FOREACH field IN ARRAY ARRAY['to', 'cc', 'bcc'] LOOP
        IF body ? field AND body->field <> 'null'::jsonb THEN
            IF jsonb_typeof(body->field) = 'string' THEN
                IF body->>field = '' THEN
                    RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = format('sendonce: "%s%s" is empty', prefix, field);
                END IF;
            ELSIF jsonb_typeof(body->field) = 'array' THEN
                IF EXISTS (SELECT 1 FROM jsonb_array_elements(body->field) e
                           WHERE jsonb_typeof(e) <> 'string' OR e #>> '{}' = '') THEN
                    RAISE EXCEPTION USING ERRCODE = 'check_violation',
                        MESSAGE = format('sendonce: "%s%s" must hold only non-empty address strings', prefix, field);
                END IF;
            ELSE
                RAISE EXCEPTION USING ERRCODE = 'check_violation',
                    MESSAGE = format('sendonce: "%s%s" must be an address string or an array of them', prefix, field);
            END IF;
        END IF;
    END LOOP;
    IF NOT body ? 'to' OR body->'to' = 'null'::jsonb OR body->'to' = '[]'::jsonb THEN
        RAISE EXCEPTION 'sendonce: payload needs at least one recipient in "%to"', prefix USING ERRCODE = 'check_violation';
    END IF;
    IF needs_content AND coalesce(body->>'html', '') = '' AND coalesce(body->>'text', '') = '' THEN
        RAISE EXCEPTION 'sendonce: payload needs content: "%html" or "%text"', prefix, prefix USING ERRCODE = 'check_violation';
    END IF;
END
$$;
-- +goose StatementEnd

-- Rows the Go API inserts arrive with their River job and were validated
-- by the same rules in Go (outbox.Intent.Validate), so the check runs on
-- rows inserted without a job, and on every change to what is sent.
CREATE TRIGGER sendonce_outbox_check
    BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL)
    EXECUTE FUNCTION sendonce_outbox_check();

CREATE TRIGGER sendonce_outbox_check_update
    BEFORE UPDATE OF idempotency_key, kind, payload, template_id ON sendonce_outbox
    FOR EACH ROW EXECUTE FUNCTION sendonce_outbox_check();

-- A row inserted by plain SQL (a producer in another language) has no River
-- job yet. Wake the workers' sweeper at commit; the sweeper also polls, so a
-- missed notification only delays the send.
-- +goose StatementBegin
CREATE FUNCTION sendonce_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sendonce_outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER sendonce_outbox_notify
    AFTER INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL)
    EXECUTE FUNCTION sendonce_outbox_notify();

-- +goose Down
DROP TABLE sendonce_outbox;
DROP FUNCTION sendonce_outbox_notify();
DROP FUNCTION sendonce_outbox_check();
DROP FUNCTION sendonce_check_email(jsonb, text, boolean);
DROP FUNCTION sendonce_is_timestamp(text);
