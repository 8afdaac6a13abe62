-- The schema sendonce's migrations leave (sql/), as pg_dump prints it from
-- a migrated database: sendonce's objects only, not River's. Written by
-- TestSchemaFile; do not edit it by hand. After adding a migration:
--   go run ./internal/cmd/withpg -- go test ./migrations -run TestSchemaFile -update

-- TYPE sendonce_status
CREATE TYPE public.sendonce_status AS (
	transition text,
	idempotency_key text,
	kind text,
	run_key text,
	tenant text,
	tags jsonb,
	message_id text
);

-- FUNCTION sendonce_address(text)
CREATE FUNCTION public.sendonce_address(a text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN sendonce_address_spelled(a) AND length(sendonce_address_part(a)) <= 320
        THEN lower(sendonce_address_part(a) COLLATE "C") END
$$;

-- FUNCTION sendonce_address_part(text)
CREATE FUNCTION public.sendonce_address_part(a text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN strpos(a, '<') > 0 THEN split_part(reverse(split_part(reverse(a), '<', 1)), '>', 1)
        ELSE btrim(a, ' ') END
$$;

-- FUNCTION sendonce_address_problem(text)
CREATE FUNCTION public.sendonce_address_problem(a text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $_$
DECLARE
    bare  text;
    part  text;
    at    integer := 0;
    ch    text;
BEGIN
    IF strpos(a, E'\t') > 0 THEN
        RETURN 'holds a tab';
    ELSIF a ~ '[\r\n]' THEN
        RETURN 'holds a line break';
    ELSIF a ~ '[\u0001-\u001F\u007F]' THEN
        RETURN 'holds a control character';
    END IF;
    ch := substring(a FROM '[\u0080-\u00A0\u1680\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\uFEFF]');
    IF ch IS NOT NULL THEN
        RETURN format('holds U+%s, a control, invisible or space character other than U+0020',
            lpad(upper(to_hex(ascii(ch))), 4, '0'));
    END IF;
    IF strpos(a, '"@') > 0 THEN
        RETURN 'has a quoted local part';
    END IF;
    bare := regexp_replace(a, '"(?:[^"\\]|\\[\s\S])*"', '""', 'g');
    -- The address part: between the last "<" and the ">" after it, or
    -- all of a spelling without "<" but the spaces around.
    part := btrim(bare, ' ');
    IF strpos(bare, '<') > 0 THEN
        part := substring(bare FROM '<([^<>]*)[^<]*$');
    END IF;
    IF strpos(part, '@') > 0 THEN
        at := length(part) - strpos(reverse(part), '@') + 1;
    END IF;
    RETURN CASE
        WHEN strpos(bare, '(') > 0 THEN 'has a comment in parentheses'
        WHEN strpos(bare, ':') > 0 THEN 'is a group'
        WHEN bare ~ '[,;]' THEN 'has "," or ";" outside quotes: several addresses, or a display name to quote'
        WHEN strpos(a, '@[') > 0 THEN 'has a domain literal'
        WHEN at > 0 AND strpos(part, ' ') > 0 THEN 'has a space inside the address'
        WHEN at > 0 AND substring(part FROM at) ~ '[^\u0001-\u007F]' THEN 'has a domain in Unicode: write it in its ASCII (xn--) form'
        WHEN at > 0 AND part ~ '[^\u0001-\u007F]' THEN 'has a local part that is not ASCII'
        WHEN strpos(bare, '"') > 0 AND a !~ '^ *"(?:[^"\\]|\\[\s\S])*" *<' THEN
            'has a display name partly quoted: quote all of it or none of it'
        WHEN at > 0 AND btrim(substring(part FROM at + 1), '-.ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789') <> '' THEN
            'has a domain with a character other than a letter, digit, hyphen or dot'
        WHEN length(part) > 320 AND sendonce_address_spelled(a) THEN
            format('has an address of %s characters, over 320', length(part))
        ELSE 'is not an email address'
    END;
END
$_$;

-- FUNCTION sendonce_address_spelled(text)
CREATE FUNCTION public.sendonce_address_spelled(a text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT a COLLATE "C" ~ $re$^ *(?:([-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+(?:\.[-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+)*@[-A-Za-z0-9]+(?:\.[-A-Za-z0-9]+)*)|(?:(?:[-A-Za-z0-9!#$%&'*+/=?^_`{|}~.\u00A1-\u167F\u1681-\u1FFF\u2010-\u2027\u2030-\u205E\u2070-\u2FFF\u3001-\uFEFE\uFF00-\U0010FFFF]+(?: +[-A-Za-z0-9!#$%&'*+/=?^_`{|}~.\u00A1-\u167F\u1681-\u1FFF\u2010-\u2027\u2030-\u205E\u2070-\u2FFF\u3001-\uFEFE\uFF00-\U0010FFFF]+)*|"(?:[ !#-Z^-~\u00A1-\u167F\u1681-\u1FFF\u2010-\u2027\u2030-\u205E\u2070-\u2FFF\u3001-\uFEFE\uFF00-\U0010FFFF]|\[|\]|\\[ -~])*") *)?<([-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+(?:\.[-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+)*@[-A-Za-z0-9]+(?:\.[-A-Za-z0-9]+)*)>) *$$re$
$_$;

-- FUNCTION sendonce_check_email(jsonb, text, boolean)
CREATE FUNCTION public.sendonce_check_email(body jsonb, prefix text, needs_content boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    field text;
    idx   bigint;
    addr  text;
BEGIN
    IF jsonb_typeof(body) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'sendonce: %email must be a JSON object', prefix USING ERRCODE = 'check_violation';
    END IF;
    IF jsonb_typeof(body->'from') IS DISTINCT FROM 'string' OR body->>'from' = '' THEN
        RAISE EXCEPTION 'sendonce: payload needs "%from"', prefix USING ERRCODE = 'check_violation';
    END IF;
    FOREACH field IN ARRAY ARRAY['to', 'cc', 'bcc'] LOOP
        IF body ? field AND body->field <> 'null'::jsonb THEN
            idx := NULL;
            IF jsonb_typeof(body->field) = 'string' THEN
                IF body->>field = '' THEN
                    RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = format('sendonce: "%s%s" is empty', prefix, field);
                END IF;
                addr := body->>field;
            ELSIF jsonb_typeof(body->field) = 'array' THEN
                IF EXISTS (SELECT 1 FROM jsonb_array_elements(body->field) e
                           WHERE jsonb_typeof(e) <> 'string' OR e #>> '{}' = '') THEN
                    RAISE EXCEPTION USING ERRCODE = 'check_violation',
                        MESSAGE = format('sendonce: "%s%s" must hold only non-empty address strings', prefix, field);
                END IF;
                SELECT e, i - 1 INTO addr, idx
                FROM jsonb_array_elements_text(body->field) WITH ORDINALITY AS x(e, i)
                WHERE sendonce_address(e) IS NULL ORDER BY i LIMIT 1;
            ELSE
                RAISE EXCEPTION USING ERRCODE = 'check_violation',
                    MESSAGE = format('sendonce: "%s%s" must be an address string or an array of them', prefix, field);
            END IF;
            IF addr IS NOT NULL AND sendonce_address(addr) IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = format(
                    'sendonce: "%s%s%s" %s %s; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches',
                    prefix, field, CASE WHEN idx IS NOT NULL THEN format('[%s]', idx) ELSE '' END,
                    to_json(left(addr, 60)), sendonce_address_problem(addr));
            END IF;
            addr := NULL;
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

-- FUNCTION sendonce_delivery_apply(bigint, text, timestamp with time zone)
CREATE FUNCTION public.sendonce_delivery_apply(p_intent bigint, p_type text, p_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    st  text := sendonce_delivery_status(p_type);
    k   text;
BEGIN
    IF st IS NULL THEN
        RETURN false;
    END IF;
    UPDATE sendonce_outbox
    SET delivery_status = st, delivery_status_at = p_at
    WHERE id = p_intent AND (delivery_status IS NULL OR
        (sendonce_delivery_rank(st), p_at, st COLLATE "C") >
        (sendonce_delivery_rank(delivery_status), delivery_status_at, delivery_status COLLATE "C"))
    RETURNING idempotency_key INTO k;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('sendonce_delivery', json_build_object('key', k, 'status', st)::text);
    RETURN true;
END
$$;

-- FUNCTION sendonce_delivery_rank(text)
CREATE FUNCTION public.sendonce_delivery_rank(status text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE status
        WHEN 'delivery_delayed' THEN 1
        WHEN 'delivered' THEN 2
        WHEN 'failed' THEN 3
        WHEN 'bounced' THEN 3
        WHEN 'suppressed' THEN 3
        WHEN 'complained' THEN 4
        ELSE 0
    END
$$;

-- FUNCTION sendonce_delivery_status(text)
CREATE FUNCTION public.sendonce_delivery_status(event_type text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE event_type
        WHEN 'email.delivery_delayed' THEN 'delivery_delayed'
        WHEN 'email.delivered' THEN 'delivered'
        WHEN 'email.failed' THEN 'failed'
        WHEN 'email.bounced' THEN 'bounced'
        WHEN 'email.suppressed' THEN 'suppressed'
        WHEN 'email.complained' THEN 'complained'
    END
$$;

-- FUNCTION sendonce_email_recipients(jsonb)
CREATE FUNCTION public.sendonce_email_recipients(body jsonb) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT sendonce_address(r)
    FROM jsonb_array_elements_text(
        jsonb_path_query_array(body, 'lax $.to ? (@.type() == "string")')
        || jsonb_path_query_array(body, 'lax $.cc ? (@.type() == "string")')
        || jsonb_path_query_array(body, 'lax $.bcc ? (@.type() == "string")')) AS r
$_$;

-- FUNCTION sendonce_event_addresses(jsonb)
CREATE FUNCTION public.sendonce_event_addresses(raw jsonb) RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
    SELECT array_agg(DISTINCT a ORDER BY a) FROM (
        SELECT sendonce_address(x) AS a
        FROM jsonb_array_elements_text(CASE jsonb_typeof(raw #> '{data,to}')
            WHEN 'array' THEN raw #> '{data,to}'
            WHEN 'string' THEN jsonb_build_array(raw #> '{data,to}')
            ELSE '[]'::jsonb END) AS x
        UNION ALL
        SELECT sendonce_address(raw -> 'data' ->> f)
        FROM unnest(ARRAY['email', 'address', 'recipient']) AS f
        WHERE jsonb_typeof(raw -> 'data' -> f) = 'string'
    ) s WHERE a LIKE '_%@_%' AND length(a) <= 320
$$;

-- FUNCTION sendonce_event_match(text)
CREATE FUNCTION public.sendonce_event_match(p_event_id text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    ev     sendonce_event;
    intent bigint;
BEGIN
    SELECT * INTO ev FROM sendonce_event WHERE event_id = p_event_id;
    IF NOT FOUND OR ev.email_id IS NULL OR ev.intent_id IS NOT NULL THEN
        RETURN ev.intent_id;
    END IF;
    intent := sendonce_message_intent(ev.email_id);
    IF intent IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE sendonce_event SET intent_id = intent WHERE event_id = p_event_id;
    PERFORM sendonce_delivery_apply(intent, ev.type, ev.occurred_at);
    PERFORM sendonce_event_suppress(p_event_id);
    RETURN intent;
END
$$;

-- FUNCTION sendonce_event_suppress(text)
CREATE FUNCTION public.sendonce_event_suppress(p_event_id text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    ev     sendonce_event;
    reason text;
    addrs  text[];
BEGIN
    -- Most events (delivered, opened, …) change nothing: they are not
    -- locked, only those that may change the list.
    reason := (SELECT CASE e.type
            WHEN 'email.bounced' THEN 'bounced'
            WHEN 'email.complained' THEN 'complained'
            WHEN 'email.suppressed' THEN 'api'
            WHEN 'suppression.added' THEN 'api'
            WHEN 'suppression.removed' THEN 'removed'
        END FROM sendonce_event e WHERE e.event_id = p_event_id);
    IF reason IS NULL THEN
        RETURN 0;
    END IF;
    SELECT * INTO ev FROM sendonce_event WHERE event_id = p_event_id FOR UPDATE;
    IF NOT FOUND OR ev.suppression_applied THEN
        RETURN 0;
    END IF;
    IF ev.type = 'email.bounced' AND lower(coalesce(ev.raw #>> '{data,bounce,type}',
            ev.raw #>> '{data,bounceType}', ev.raw #>> '{data,bounce_type}', '')) IN ('soft', 'transient', 'temporary') THEN
        RETURN 0;
    END IF;
    addrs := sendonce_event_addresses(ev.raw);
    IF addrs IS NULL AND ev.type LIKE 'email.%' THEN
        IF ev.intent_id IS NULL THEN
            RETURN 0; -- applied when it matches its intent, at its own time all the same
        END IF;
        SELECT array_agg(DISTINCT r ORDER BY r) INTO addrs
        FROM sendonce_outbox o, sendonce_recipients(o.kind, o.payload) AS r
        WHERE o.id = ev.intent_id AND o.kind IN ('email', 'template') AND r LIKE '_%@_%' AND length(r) <= 320;
    END IF;
    UPDATE sendonce_event SET suppression_applied = true WHERE event_id = p_event_id;
    IF addrs IS NULL THEN
        RETURN 0;
    END IF;
    RETURN sendonce_suppression_set(addrs, reason = 'removed', nullif(reason, 'removed'),
        'webhook ' || ev.delivery_id, ev.occurred_at);
END
$$;

-- FUNCTION sendonce_events_match_pending(integer)
CREATE FUNCTION public.sendonce_events_match_pending(max_events integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    ev record;
    n  integer := 0;
BEGIN
    FOR ev IN SELECT e.event_id FROM sendonce_event e
        WHERE e.intent_id IS NULL AND e.received_at > now() - interval '1 day'
            AND e.email_id IS NOT NULL
            AND sendonce_message_intent(e.email_id) IS NOT NULL
        ORDER BY e.received_at DESC LIMIT max_events
        FOR UPDATE OF e SKIP LOCKED
    LOOP
        IF sendonce_event_match(ev.event_id) IS NOT NULL THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- FUNCTION sendonce_intent_hash(text, text, jsonb)
CREATE FUNCTION public.sendonce_intent_hash(kind text, template_id text, payload jsonb) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT substring(sha256(convert_to(jsonb_build_array(kind, template_id, payload)::text, 'UTF8')) FROM 1 FOR 16)
$$;

-- FUNCTION sendonce_is_timestamp(text)
CREATE FUNCTION public.sendonce_is_timestamp(t text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    PERFORM t::timestamptz;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;

-- FUNCTION sendonce_key_hash(text)
CREATE FUNCTION public.sendonce_key_hash(k text) RETURNS bytea
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    AS $$
    SELECT substring(sha256(convert_to(k, 'UTF8')) FROM 1 FOR 16)
$$;

-- FUNCTION sendonce_message_intent(text)
CREATE FUNCTION public.sendonce_message_intent(p_email_id text) RETURNS bigint
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT min(id) FROM (
        SELECT id FROM sendonce_outbox WHERE message_id = p_email_id AND kind <> 'batch'
        UNION ALL
        SELECT id FROM sendonce_outbox
        WHERE kind = 'batch' AND message_id IS NOT NULL AND string_to_array(message_id, ',') @> ARRAY[p_email_id]
    ) m);
END
$$;

-- FUNCTION sendonce_outbox_check()
CREATE FUNCTION public.sendonce_outbox_check() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
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
$_$;

-- FUNCTION sendonce_outbox_key_clock()
CREATE FUNCTION public.sendonce_outbox_key_clock() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = format(
        'sendonce: idempotency_key %s holds a clock reading (%s): derive the key from the cause of the send ("invoice:inv_4192"), never from a clock: a producer that runs again reads the clock again, gets another key, and sends a second time',
        quote_literal(left(NEW.idempotency_key, 60)), substring(NEW.idempotency_key FROM '[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9][0-9]*(?:[Zz]|-[0-9]{2}:[0-9]{2})?'));
END
$$;

-- FUNCTION sendonce_outbox_notify()
CREATE FUNCTION public.sendonce_outbox_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('sendonce_outbox', '');
    RETURN NULL;
END
$$;

-- FUNCTION sendonce_outbox_run_key_moved()
CREATE FUNCTION public.sendonce_outbox_run_key_moved() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('sendonce.run_key_moved', 'on', true);
    RETURN NULL;
END
$$;

-- FUNCTION sendonce_outbox_run_member()
CREATE FUNCTION public.sendonce_outbox_run_member() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION sendonce_outbox_snapshot()
CREATE FUNCTION public.sendonce_outbox_snapshot() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION sendonce_outbox_tally()
CREATE FUNCTION public.sendonce_outbox_tally() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION sendonce_outbox_tally_truncate()
CREATE FUNCTION public.sendonce_outbox_tally_truncate() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM sendonce_outbox_tally;
    DELETE FROM sendonce_run_tally;
    RETURN NULL;
END
$$;

-- FUNCTION sendonce_outbox_tombstone()
CREATE FUNCTION public.sendonce_outbox_tombstone() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    h bytea;
BEGIN
    SELECT intent_hash INTO h FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash(NEW.idempotency_key);
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF h = sendonce_intent_hash(NEW.kind, NEW.template_id, NEW.payload) THEN
        IF TG_WHEN = 'AFTER' THEN
            -- Raced a prune (see below): take the row back.
            DELETE FROM sendonce_outbox WHERE id = NEW.id;
        END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'sendonce: idempotency key % is already used by an intent with a different kind, template or payload (idempotency_key_reuse; the intent was pruned)',
        quote_literal(NEW.idempotency_key) USING ERRCODE = 'unique_violation';
END
$$;

-- FUNCTION sendonce_recipients(text, jsonb)
CREATE FUNCTION public.sendonce_recipients(kind text, payload jsonb) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT sendonce_address(r)
    FROM jsonb_array_elements_text(CASE
        WHEN kind IN ('email', 'template') THEN
            jsonb_path_query_array(payload, 'lax $.to ? (@.type() == "string")')
            || jsonb_path_query_array(payload, 'lax $.cc ? (@.type() == "string")')
            || jsonb_path_query_array(payload, 'lax $.bcc ? (@.type() == "string")')
        WHEN kind = 'batch' AND jsonb_typeof(payload -> 'emails') = 'array' THEN
            jsonb_path_query_array(payload, 'lax $.emails[*].to ? (@.type() == "string")')
            || jsonb_path_query_array(payload, 'lax $.emails[*].cc ? (@.type() == "string")')
            || jsonb_path_query_array(payload, 'lax $.emails[*].bcc ? (@.type() == "string")')
        ELSE '[]' END) AS r
$_$;

-- FUNCTION sendonce_run_breaker()
CREATE FUNCTION public.sendonce_run_breaker() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    dk     integer := coalesce(NEW.delivery_status IN ('delivered', 'bounced', 'complained'), false)::integer
                    - coalesce(OLD.delivery_status IN ('delivered', 'bounced', 'complained'), false)::integer;
    dh     integer := coalesce(NEW.delivery_status = 'bounced', false)::integer - coalesce(OLD.delivery_status = 'bounced', false)::integer;
    dc     integer := coalesce(NEW.delivery_status = 'complained', false)::integer - coalesce(OLD.delivery_status = 'complained', false)::integer;
    r      sendonce_run;
    k      bigint;
    h      bigint;
    c      bigint;
    reason text;
BEGIN
    IF dk = 0 AND dh = 0 AND dc = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO sendonce_run_outcome AS o (run_key, shard, known, hard, complained)
    VALUES (NEW.run_key, (pg_backend_pid() % 16)::smallint, dk, dh, dc)
    ON CONFLICT (run_key, shard) DO UPDATE
    SET known = o.known + EXCLUDED.known, hard = o.hard + EXCLUDED.hard, complained = o.complained + EXCLUDED.complained;
    SELECT * INTO r FROM sendonce_run WHERE key = NEW.run_key;
    IF NOT FOUND OR r.state <> 'active' OR (r.breaker_bounce_rate IS NULL AND r.breaker_complaint_rate IS NULL) THEN
        RETURN NULL;
    END IF;
    SELECT sum(o.known) - r.breaker_since_known, sum(o.hard) - r.breaker_since_hard, sum(o.complained) - r.breaker_since_complained
    INTO k, h, c FROM sendonce_run_outcome o WHERE o.run_key = NEW.run_key;
    IF k < r.breaker_min_outcomes THEN
        RETURN NULL;
    END IF;
    IF r.breaker_bounce_rate IS NOT NULL AND h::numeric >= r.breaker_bounce_rate::numeric * k THEN
        reason := format('bounce rate %s%% (%s of %s known outcomes) >= %s%% threshold',
            round(100.0 * h / k, 1), h, k, trim_scale((100 * r.breaker_bounce_rate)::numeric));
    ELSIF r.breaker_complaint_rate IS NOT NULL AND c::numeric >= r.breaker_complaint_rate::numeric * k THEN
        reason := format('complaint rate %s%% (%s of %s known outcomes) >= %s%% threshold',
            round(100.0 * c / k, 2), c, k, trim_scale((100 * r.breaker_complaint_rate)::numeric));
    ELSE
        RETURN NULL;
    END IF;
    IF r.breaker_since_known > 0 THEN
        reason := reason || ' since the last resume';
    END IF;
    -- A run with nothing left to send is not paused: there is nothing to
    -- hold back, and a paused run is never pruned.
    IF NOT EXISTS (SELECT 1 FROM sendonce_outbox WHERE run_key = NEW.run_key AND state IN ('pending', 'sending')) THEN
        RETURN NULL;
    END IF;
    UPDATE sendonce_run SET state = 'paused', pause_reason = reason, breaker_tripped_at = now(),
        breaker_trip_known = k, breaker_trip_hard = h, breaker_trip_complained = c, updated_at = now()
    WHERE key = NEW.run_key AND state = 'active';
    IF FOUND THEN
        PERFORM set_config('sendonce.breaker_trips',
            coalesce(current_setting('sendonce.breaker_trips', true), '') || NEW.run_key || E'\t' || reason || E'\n', true);
    END IF;
    RETURN NULL;
END
$$;

-- FUNCTION sendonce_run_held()
CREATE FUNCTION public.sendonce_run_held() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    why text;
BEGIN
    SELECT s.scope || ' ' || CASE WHEN s.name = '' THEN 'default' ELSE s.name END || ': ' || s.reason INTO why
    FROM sendonce_breaker_state s
    WHERE s.tripped_at IS NOT NULL AND ((s.scope = 'topic' AND s.name = NEW.topic) OR (s.scope = 'tenant' AND s.name = coalesce(NEW.tenant, '')))
    ORDER BY s.scope DESC LIMIT 1;
    IF why IS NOT NULL THEN
        NEW.state := 'paused';
        NEW.pause_reason := why;
    END IF;
    RETURN NEW;
END
$$;

-- FUNCTION sendonce_run_tenant()
CREATE FUNCTION public.sendonce_run_tenant() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION sendonce_run_tenant_fixed()
CREATE FUNCTION public.sendonce_run_tenant_fixed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'sendonce: cannot change the tenant of run % from % to %: a run''s tenant is set when it is created, and its members have it',
        quote_literal(OLD.key), quote_literal(coalesce(OLD.tenant, 'default')), quote_literal(coalesce(NEW.tenant, 'default'))
        USING ERRCODE = 'check_violation', CONSTRAINT = 'sendonce_run_tenant_fixed';
END
$$;

-- FUNCTION sendonce_run_topic()
CREATE FUNCTION public.sendonce_run_topic() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.kind <> 'broadcast' THEN
        NEW.topic := (SELECT r.topic FROM sendonce_run r WHERE r.key = NEW.run_key);
    END IF;
    RETURN NEW;
END
$$;

-- FUNCTION sendonce_scope_breaker()
CREATE FUNCTION public.sendonce_scope_breaker() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    dk     integer := coalesce(NEW.delivery_status IN ('delivered', 'bounced', 'complained'), false)::integer
                    - coalesce(OLD.delivery_status IN ('delivered', 'bounced', 'complained'), false)::integer;
    dh     integer := coalesce(NEW.delivery_status = 'bounced', false)::integer - coalesce(OLD.delivery_status = 'bounced', false)::integer;
    dc     integer := coalesce(NEW.delivery_status = 'complained', false)::integer - coalesce(OLD.delivery_status = 'complained', false)::integer;
    sc     text;
    nm     text;
    b      sendonce_breaker;
    st     sendonce_breaker_state;
    k      bigint;
    h      bigint;
    c      bigint;
    reason text;
    what   text;
    run    text;
BEGIN
    IF dk = 0 AND dh = 0 AND dc = 0 THEN
        RETURN NULL;
    END IF;
    FOR sc, nm IN SELECT * FROM (VALUES ('topic', NEW.topic), ('tenant', coalesce(NEW.tenant, ''))) AS v(s, n) WHERE v.n IS NOT NULL LOOP
        INSERT INTO sendonce_breaker_outcome AS o (scope, name, shard, known, hard, complained)
        VALUES (sc, nm, (pg_backend_pid() % 16)::smallint, dk, dh, dc)
        ON CONFLICT (scope, name, shard) DO UPDATE
        SET known = o.known + EXCLUDED.known, hard = o.hard + EXCLUDED.hard, complained = o.complained + EXCLUDED.complained;
        SELECT * INTO b FROM sendonce_breaker WHERE scope = sc AND name IN (nm, '*') ORDER BY name = '*' LIMIT 1;
        IF NOT FOUND THEN
            b := ROW(sc, nm, false, 0.05, 0.001, 1000, now())::sendonce_breaker;
        END IF;
        IF b.off THEN
            CONTINUE;
        END IF;
        SELECT * INTO st FROM sendonce_breaker_state WHERE scope = sc AND name = nm;
        IF FOUND AND st.tripped_at IS NOT NULL THEN
            CONTINUE;
        END IF;
        SELECT sum(o.known) - coalesce(st.since_known, 0), sum(o.hard) - coalesce(st.since_hard, 0),
            sum(o.complained) - coalesce(st.since_complained, 0)
        INTO k, h, c FROM sendonce_breaker_outcome o WHERE o.scope = sc AND o.name = nm;
        IF k < b.min_outcomes THEN
            CONTINUE;
        END IF;
        IF h::numeric >= b.bounce_rate::numeric * k THEN
            reason := format('bounce rate %s%% (%s of %s known outcomes) >= %s%% threshold',
                round(100.0 * h / k, 1), h, k, trim_scale((100 * b.bounce_rate)::numeric));
        ELSIF c::numeric >= b.complaint_rate::numeric * k THEN
            reason := format('complaint rate %s%% (%s of %s known outcomes) >= %s%% threshold',
                round(100.0 * c / k, 2), c, k, trim_scale((100 * b.complaint_rate)::numeric));
        ELSE
            CONTINUE;
        END IF;
        IF coalesce(st.since_known, 0) > 0 THEN
            reason := reason || ' since the last resume';
        END IF;
        INSERT INTO sendonce_breaker_state AS s (scope, name, tripped_at, reason, trip_known, trip_hard, trip_complained)
        VALUES (sc, nm, now(), reason, k, h, c)
        ON CONFLICT (scope, name) DO UPDATE
        SET tripped_at = now(), reason = EXCLUDED.reason, trip_known = k, trip_hard = h, trip_complained = c;
        what := sc || ' ' || CASE WHEN nm = '' THEN 'default' ELSE nm END || ': ' || reason;
        FOR run IN UPDATE sendonce_run r SET state = 'paused', pause_reason = what, updated_at = now()
            WHERE r.state = 'active' AND CASE sc WHEN 'topic' THEN r.topic = nm ELSE coalesce(r.tenant, '') = nm END
                AND EXISTS (SELECT 1 FROM sendonce_outbox m WHERE m.run_key = r.key AND m.state IN ('pending', 'sending'))
            RETURNING r.key
        LOOP
            PERFORM set_config('sendonce.breaker_trips',
                coalesce(current_setting('sendonce.breaker_trips', true), '') || run || E'\t' || what || E'\n', true);
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$;

-- FUNCTION sendonce_status_changes()
CREATE FUNCTION public.sendonce_status_changes() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION sendonce_status_hook_disable()
CREATE FUNCTION public.sendonce_status_hook_disable() RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DROP TRIGGER IF EXISTS sendonce_outbox_status_hook ON sendonce_outbox;
END
$$;

-- FUNCTION sendonce_status_hook_enable()
CREATE FUNCTION public.sendonce_status_hook_enable() RETURNS void
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION sendonce_suppressed(text, jsonb)
CREATE FUNCTION public.sendonce_suppressed(kind text, payload jsonb) RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
    SELECT array_agg(DISTINCT s.address ORDER BY s.address)
    FROM sendonce_recipients(kind, payload) AS r
    JOIN sendonce_suppression s ON s.address = r
$$;

-- FUNCTION sendonce_suppressed(text, jsonb, text)
CREATE FUNCTION public.sendonce_suppressed(kind text, payload jsonb, topic text) RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
    SELECT array_agg(DISTINCT a ORDER BY a) FROM sendonce_suppressed_addresses(kind, payload, topic) AS a
$$;

-- FUNCTION sendonce_suppressed_addresses(text, jsonb, text)
CREATE FUNCTION public.sendonce_suppressed_addresses(kind text, payload jsonb, topic text) RETURNS SETOF text
    LANGUAGE sql STABLE
    AS $_$
    SELECT s.address FROM sendonce_suppression s
    WHERE s.address = ANY (ARRAY(SELECT r FROM sendonce_recipients(kind, payload) AS r))
    UNION ALL
    SELECT u.address FROM sendonce_unsubscribe u
    WHERE $3 IS NOT NULL AND u.topic = $3
        AND u.address = ANY (ARRAY(SELECT r FROM sendonce_recipients(kind, payload) AS r))
$_$;

-- FUNCTION sendonce_suppression_set(text[], boolean, text, text, timestamp with time zone)
CREATE FUNCTION public.sendonce_suppression_set(p_addrs text[], p_removed boolean, p_reason text, p_source text, p_at timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    won text[];
    n   integer;
BEGIN
    WITH changed AS (
        INSERT INTO sendonce_suppression_change AS c (address, changed_at, removed)
        SELECT a, coalesce(p_at, now()), p_removed
        FROM (SELECT DISTINCT a FROM unnest(p_addrs) AS a WHERE a IS NOT NULL) s ORDER BY a
        ON CONFLICT (address) DO UPDATE
        SET changed_at = CASE WHEN p_at IS NULL THEN greatest(c.changed_at, now()) ELSE p_at END,
            removed = p_removed
        WHERE p_at IS NULL OR (p_at, NOT p_removed) > (c.changed_at, NOT c.removed)
        RETURNING c.address)
    SELECT array_agg(address ORDER BY address) INTO won FROM changed;
    IF won IS NULL THEN
        RETURN 0;
    END IF;
    IF p_removed THEN
        DELETE FROM sendonce_suppression WHERE address = ANY(won);
    ELSE
        INSERT INTO sendonce_suppression (address, reason, source)
        SELECT a, p_reason, p_source FROM unnest(won) AS a
        ON CONFLICT (address) DO NOTHING;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- FUNCTION sendonce_tally_compact()
CREATE FUNCTION public.sendonce_tally_compact() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

-- TABLE sendonce_batch
CREATE TABLE public.sendonce_batch (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    queue text NOT NULL,
    body text NOT NULL,
    member_keys text[] NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    job_id bigint,
    first_attempt_at timestamp with time zone,
    uncertain boolean DEFAULT false NOT NULL,
    claimed_by integer,
    api_key_fingerprint text,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    run_key text,
    CONSTRAINT sendonce_batch_members_check CHECK (((cardinality(member_keys) >= 1) AND (cardinality(member_keys) <= 100))),
    CONSTRAINT sendonce_batch_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'sending'::text, 'sent'::text, 'failed'::text, 'split'::text, 'canceled'::text])))
);

-- SEQUENCE sendonce_batch_id_seq
ALTER TABLE public.sendonce_batch ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.sendonce_batch_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- TABLE sendonce_breaker
CREATE TABLE public.sendonce_breaker (
    scope text NOT NULL,
    name text NOT NULL,
    off boolean DEFAULT false NOT NULL,
    bounce_rate double precision DEFAULT 0.05 NOT NULL,
    complaint_rate double precision DEFAULT 0.001 NOT NULL,
    min_outcomes integer DEFAULT 1000 NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sendonce_breaker_bounce_rate_check CHECK (((bounce_rate > (0)::double precision) AND (bounce_rate <= (1)::double precision))),
    CONSTRAINT sendonce_breaker_complaint_rate_check CHECK (((complaint_rate > (0)::double precision) AND (complaint_rate <= (1)::double precision))),
    CONSTRAINT sendonce_breaker_min_outcomes_check CHECK ((min_outcomes >= 1)),
    CONSTRAINT sendonce_breaker_scope_check CHECK ((scope = ANY (ARRAY['topic'::text, 'tenant'::text])))
);

-- TABLE sendonce_breaker_outcome
CREATE TABLE public.sendonce_breaker_outcome (
    scope text NOT NULL,
    name text NOT NULL,
    shard smallint NOT NULL,
    known bigint DEFAULT 0 NOT NULL,
    hard bigint DEFAULT 0 NOT NULL,
    complained bigint DEFAULT 0 NOT NULL
);

-- TABLE sendonce_breaker_state
CREATE TABLE public.sendonce_breaker_state (
    scope text NOT NULL,
    name text NOT NULL,
    since_known bigint DEFAULT 0 NOT NULL,
    since_hard bigint DEFAULT 0 NOT NULL,
    since_complained bigint DEFAULT 0 NOT NULL,
    tripped_at timestamp with time zone,
    reason text,
    trip_known bigint,
    trip_hard bigint,
    trip_complained bigint
);

-- TABLE sendonce_event
CREATE TABLE public.sendonce_event (
    delivery_id text NOT NULL,
    event_id text NOT NULL,
    type text NOT NULL,
    email_id text,
    occurred_at timestamp with time zone NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    raw jsonb NOT NULL,
    intent_id bigint,
    suppression_applied boolean DEFAULT false NOT NULL
);

-- TABLE sendonce_outbox
CREATE TABLE public.sendonce_outbox (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    kind text DEFAULT 'email'::text NOT NULL,
    payload jsonb NOT NULL,
    template_id text,
    send_at timestamp with time zone,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    message_id text,
    replayed boolean DEFAULT false NOT NULL,
    last_error text,
    job_id bigint,
    first_attempt_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    uncertain boolean DEFAULT false NOT NULL,
    claimed_by integer,
    api_key_fingerprint text,
    snoozes integer DEFAULT 0 NOT NULL,
    forced_retry_at timestamp with time zone,
    batch_key text,
    run_key text,
    delivery_status text,
    delivery_status_at timestamp with time zone,
    suppressed_recipients text[],
    traceparent text,
    tracestate text,
    topic text,
    list_unsubscribe jsonb,
    next_attempt_at timestamp with time zone,
    rate_limited integer DEFAULT 0 NOT NULL,
    tries integer DEFAULT 0 NOT NULL,
    queue text DEFAULT 'sendonce'::text NOT NULL,
    checked boolean DEFAULT false NOT NULL,
    tenant text,
    CONSTRAINT sendonce_outbox_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT sendonce_outbox_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'sending'::text, 'sent'::text, 'failed'::text, 'canceled'::text, 'suppressed'::text]))),
    CONSTRAINT sendonce_outbox_topic_check CHECK (((topic IS NULL) OR ((topic ~ '^[a-z][a-z0-9_-]{0,63}$'::text) AND (kind <> 'broadcast'::text)))),
    CONSTRAINT sendonce_outbox_traceparent_check CHECK ((traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text)),
    CONSTRAINT sendonce_outbox_tracestate_check CHECK ((length(tracestate) <= 512))
)
WITH (fillfactor='70', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.01', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_limit='2000');

-- SEQUENCE sendonce_outbox_id_seq
ALTER TABLE public.sendonce_outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.sendonce_outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- TABLE sendonce_outbox_tally
CREATE TABLE public.sendonce_outbox_tally (
    minute timestamp with time zone,
    state text NOT NULL,
    delivery_status text NOT NULL,
    n bigint NOT NULL
)
WITH (autovacuum_vacuum_threshold='500', autovacuum_vacuum_scale_factor='0');

-- TABLE sendonce_rate_budget
CREATE TABLE public.sendonce_rate_budget (
    key_fingerprint text NOT NULL,
    ceiling double precision,
    rate double precision,
    tokens double precision DEFAULT 0 NOT NULL,
    refilled_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_until timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    decreased_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    throttles bigint DEFAULT 0 NOT NULL,
    probe_until timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    ceiling_seen_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    recent_requests double precision DEFAULT 0 NOT NULL,
    recent_refusals double precision DEFAULT 0 NOT NULL,
    recent_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    CONSTRAINT sendonce_rate_budget_ceiling_check CHECK (((ceiling IS NULL) OR (ceiling > (0)::double precision))),
    CONSTRAINT sendonce_rate_budget_rate_check CHECK (((rate IS NULL) OR (rate > (0)::double precision)))
);

-- TABLE sendonce_rate_quota
CREATE TABLE public.sendonce_rate_quota (
    key_fingerprint text NOT NULL,
    period text NOT NULL,
    quota bigint,
    period_start timestamp with time zone NOT NULL,
    resets_at timestamp with time zone NOT NULL,
    used bigint DEFAULT 0 NOT NULL,
    exhausted_until timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    exhausted_by text DEFAULT ''::text NOT NULL,
    probe_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    count_off_until timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    CONSTRAINT sendonce_rate_quota_period_check CHECK ((period = ANY (ARRAY['d'::text, 'mo'::text]))),
    CONSTRAINT sendonce_rate_quota_quota_check CHECK (((quota IS NULL) OR (quota > 0))),
    CONSTRAINT sendonce_rate_quota_used_check CHECK ((used >= 0))
);

-- TABLE sendonce_run
CREATE TABLE public.sendonce_run (
    key text NOT NULL,
    send_at timestamp with time zone,
    state text DEFAULT 'active'::text NOT NULL,
    schedule_name text,
    occurrence timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    topic text,
    tenant text,
    breaker_bounce_rate double precision DEFAULT 0.05,
    breaker_complaint_rate double precision DEFAULT 0.001,
    breaker_min_outcomes integer DEFAULT 100 NOT NULL,
    breaker_changed_at timestamp with time zone,
    breaker_since_known bigint DEFAULT 0 NOT NULL,
    breaker_since_hard bigint DEFAULT 0 NOT NULL,
    breaker_since_complained bigint DEFAULT 0 NOT NULL,
    pause_reason text,
    breaker_tripped_at timestamp with time zone,
    breaker_trip_known bigint,
    breaker_trip_hard bigint,
    breaker_trip_complained bigint,
    CONSTRAINT sendonce_run_breaker_bounce_rate_check CHECK (((breaker_bounce_rate > (0)::double precision) AND (breaker_bounce_rate <= (1)::double precision))),
    CONSTRAINT sendonce_run_breaker_complaint_rate_check CHECK (((breaker_complaint_rate > (0)::double precision) AND (breaker_complaint_rate <= (1)::double precision))),
    CONSTRAINT sendonce_run_breaker_min_outcomes_check CHECK ((breaker_min_outcomes >= 1)),
    CONSTRAINT sendonce_run_key_check CHECK ((key ~ '^[A-Za-z0-9_.:-]{1,200}$'::text)),
    CONSTRAINT sendonce_run_state_check CHECK ((state = ANY (ARRAY['active'::text, 'paused'::text, 'canceled'::text]))),
    CONSTRAINT sendonce_run_tenant_check CHECK (((tenant ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'::text) AND (tenant <> 'default'::text))),
    CONSTRAINT sendonce_run_topic_check CHECK ((topic ~ '^[a-z][a-z0-9_-]{0,63}$'::text))
);

-- TABLE sendonce_run_outcome
CREATE TABLE public.sendonce_run_outcome (
    run_key text NOT NULL,
    shard smallint NOT NULL,
    known bigint DEFAULT 0 NOT NULL,
    hard bigint DEFAULT 0 NOT NULL,
    complained bigint DEFAULT 0 NOT NULL
);

-- TABLE sendonce_run_tally
CREATE TABLE public.sendonce_run_tally (
    run_key text NOT NULL,
    at timestamp with time zone,
    state text NOT NULL,
    delivery_status text NOT NULL,
    n bigint NOT NULL
)
WITH (autovacuum_vacuum_threshold='500', autovacuum_vacuum_scale_factor='0');

-- TABLE sendonce_schedule
CREATE TABLE public.sendonce_schedule (
    name text NOT NULL,
    spec text NOT NULL,
    producer text,
    statement text,
    missed text DEFAULT 'late'::text NOT NULL,
    next_at timestamp with time zone NOT NULL,
    last_run text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    last_error text,
    failed_at timestamp with time zone,
    retry_at timestamp with time zone,
    topic text,
    tenant text,
    CONSTRAINT sendonce_schedule_missed_check CHECK ((missed = ANY (ARRAY['late'::text, 'skip'::text]))),
    CONSTRAINT sendonce_schedule_name_check CHECK ((name ~ '^[A-Za-z0-9_.-]{1,100}$'::text)),
    CONSTRAINT sendonce_schedule_source_check CHECK (((producer IS NULL) <> (statement IS NULL))),
    CONSTRAINT sendonce_schedule_tenant_check CHECK (((tenant ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'::text) AND (tenant <> 'default'::text))),
    CONSTRAINT sendonce_schedule_topic_check CHECK ((topic ~ '^[a-z][a-z0-9_-]{0,63}$'::text))
);

-- TABLE sendonce_suppression
CREATE TABLE public.sendonce_suppression (
    address text NOT NULL,
    reason text NOT NULL,
    source text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sendonce_suppression_address_check CHECK (((address = public.sendonce_address(address)) AND (address ~~ '_%@_%'::text) AND (length(address) <= 320))),
    CONSTRAINT sendonce_suppression_reason_check CHECK ((reason = ANY (ARRAY['bounced'::text, 'complained'::text, 'api'::text, 'manual'::text])))
);

-- TABLE sendonce_suppression_change
CREATE TABLE public.sendonce_suppression_change (
    address text NOT NULL,
    changed_at timestamp with time zone NOT NULL,
    removed boolean NOT NULL
);

-- TABLE sendonce_tenant
CREATE TABLE public.sendonce_tenant (
    name text NOT NULL,
    weight integer DEFAULT 1 NOT NULL,
    rate double precision,
    quota_day bigint,
    quota_month bigint,
    tokens double precision DEFAULT 0 NOT NULL,
    refilled_at timestamp with time zone,
    day_start timestamp with time zone,
    day_count bigint DEFAULT 0 NOT NULL,
    month_start timestamp with time zone,
    month_count bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sendonce_tenant_name_check CHECK (((name = ''::text) OR ((name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'::text) AND (name <> 'default'::text)))),
    CONSTRAINT sendonce_tenant_quota_day_check CHECK ((quota_day >= 0)),
    CONSTRAINT sendonce_tenant_quota_month_check CHECK ((quota_month >= 0)),
    CONSTRAINT sendonce_tenant_rate_check CHECK (((rate > (0)::double precision) AND (rate <= (1000000)::double precision))),
    CONSTRAINT sendonce_tenant_weight_check CHECK (((weight >= 1) AND (weight <= 1000)))
);

-- TABLE sendonce_tombstone
CREATE TABLE public.sendonce_tombstone (
    key_hash bytea NOT NULL,
    intent_hash bytea NOT NULL,
    state text NOT NULL,
    pruned_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE sendonce_unsubscribe
CREATE TABLE public.sendonce_unsubscribe (
    address text NOT NULL,
    topic text NOT NULL,
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sendonce_unsubscribe_address_check CHECK (((address = public.sendonce_address(address)) AND (address ~~ '_%@_%'::text) AND (length(address) <= 320))),
    CONSTRAINT sendonce_unsubscribe_topic_check CHECK ((topic ~ '^[a-z][a-z0-9_-]{0,63}$'::text))
);

-- TABLE sendonce_unsubscribe_event
CREATE TABLE public.sendonce_unsubscribe_event (
    id bigint NOT NULL,
    address text NOT NULL,
    topic text NOT NULL,
    action text NOT NULL,
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sendonce_unsubscribe_event_action_check CHECK ((action = ANY (ARRAY['unsubscribed'::text, 'resubscribed'::text])))
);

-- SEQUENCE sendonce_unsubscribe_event_id_seq
ALTER TABLE public.sendonce_unsubscribe_event ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.sendonce_unsubscribe_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- TABLE sendonce_worker
CREATE TABLE public.sendonce_worker (
    id integer NOT NULL,
    epoch integer NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    river_client_id text,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    renewed_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_until timestamp with time zone NOT NULL,
    ended_at timestamp with time zone,
    end_reason text,
    tenants jsonb,
    CONSTRAINT sendonce_worker_check CHECK (((ended_at IS NULL) = (end_reason IS NULL))),
    CONSTRAINT sendonce_worker_end_reason_check CHECK ((end_reason = ANY (ARRAY['lapsed'::text, 'stopped'::text])))
);

-- SEQUENCE sendonce_worker_id_seq
CREATE SEQUENCE public.sendonce_worker_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
    CYCLE;

-- CONSTRAINT sendonce_batch sendonce_batch_idempotency_key_key
ALTER TABLE ONLY public.sendonce_batch
    ADD CONSTRAINT sendonce_batch_idempotency_key_key UNIQUE (idempotency_key);

-- CONSTRAINT sendonce_batch sendonce_batch_pkey
ALTER TABLE ONLY public.sendonce_batch
    ADD CONSTRAINT sendonce_batch_pkey PRIMARY KEY (id);

-- CONSTRAINT sendonce_breaker_outcome sendonce_breaker_outcome_pkey
ALTER TABLE ONLY public.sendonce_breaker_outcome
    ADD CONSTRAINT sendonce_breaker_outcome_pkey PRIMARY KEY (scope, name, shard);

-- CONSTRAINT sendonce_breaker sendonce_breaker_pkey
ALTER TABLE ONLY public.sendonce_breaker
    ADD CONSTRAINT sendonce_breaker_pkey PRIMARY KEY (scope, name);

-- CONSTRAINT sendonce_breaker_state sendonce_breaker_state_pkey
ALTER TABLE ONLY public.sendonce_breaker_state
    ADD CONSTRAINT sendonce_breaker_state_pkey PRIMARY KEY (scope, name);

-- CONSTRAINT sendonce_event sendonce_event_pkey
ALTER TABLE ONLY public.sendonce_event
    ADD CONSTRAINT sendonce_event_pkey PRIMARY KEY (event_id);

-- CONSTRAINT sendonce_outbox sendonce_outbox_idempotency_key_key
ALTER TABLE ONLY public.sendonce_outbox
    ADD CONSTRAINT sendonce_outbox_idempotency_key_key UNIQUE (idempotency_key);

-- CONSTRAINT sendonce_outbox sendonce_outbox_pkey
ALTER TABLE ONLY public.sendonce_outbox
    ADD CONSTRAINT sendonce_outbox_pkey PRIMARY KEY (id);

-- CHECK CONSTRAINT sendonce_outbox sendonce_outbox_queue_check
ALTER TABLE public.sendonce_outbox
    ADD CONSTRAINT sendonce_outbox_queue_check CHECK (((length(queue) <= 64) AND (queue ~ '^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$'::text))) NOT VALID;

-- CHECK CONSTRAINT sendonce_outbox sendonce_outbox_tenant_check
ALTER TABLE public.sendonce_outbox
    ADD CONSTRAINT sendonce_outbox_tenant_check CHECK (((tenant ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'::text) AND (tenant <> 'default'::text))) NOT VALID;

-- CONSTRAINT sendonce_rate_budget sendonce_rate_budget_pkey
ALTER TABLE ONLY public.sendonce_rate_budget
    ADD CONSTRAINT sendonce_rate_budget_pkey PRIMARY KEY (key_fingerprint);

-- CONSTRAINT sendonce_rate_quota sendonce_rate_quota_pkey
ALTER TABLE ONLY public.sendonce_rate_quota
    ADD CONSTRAINT sendonce_rate_quota_pkey PRIMARY KEY (key_fingerprint, period);

-- CONSTRAINT sendonce_run_outcome sendonce_run_outcome_pkey
ALTER TABLE ONLY public.sendonce_run_outcome
    ADD CONSTRAINT sendonce_run_outcome_pkey PRIMARY KEY (run_key, shard);

-- CONSTRAINT sendonce_run sendonce_run_pkey
ALTER TABLE ONLY public.sendonce_run
    ADD CONSTRAINT sendonce_run_pkey PRIMARY KEY (key);

-- CONSTRAINT sendonce_schedule sendonce_schedule_pkey
ALTER TABLE ONLY public.sendonce_schedule
    ADD CONSTRAINT sendonce_schedule_pkey PRIMARY KEY (name);

-- CONSTRAINT sendonce_suppression_change sendonce_suppression_change_pkey
ALTER TABLE ONLY public.sendonce_suppression_change
    ADD CONSTRAINT sendonce_suppression_change_pkey PRIMARY KEY (address);

-- CONSTRAINT sendonce_suppression sendonce_suppression_pkey
ALTER TABLE ONLY public.sendonce_suppression
    ADD CONSTRAINT sendonce_suppression_pkey PRIMARY KEY (address);

-- CONSTRAINT sendonce_tenant sendonce_tenant_pkey
ALTER TABLE ONLY public.sendonce_tenant
    ADD CONSTRAINT sendonce_tenant_pkey PRIMARY KEY (name);

-- CONSTRAINT sendonce_tombstone sendonce_tombstone_pkey
ALTER TABLE ONLY public.sendonce_tombstone
    ADD CONSTRAINT sendonce_tombstone_pkey PRIMARY KEY (key_hash);

-- CONSTRAINT sendonce_unsubscribe_event sendonce_unsubscribe_event_pkey
ALTER TABLE ONLY public.sendonce_unsubscribe_event
    ADD CONSTRAINT sendonce_unsubscribe_event_pkey PRIMARY KEY (id);

-- CONSTRAINT sendonce_unsubscribe sendonce_unsubscribe_pkey
ALTER TABLE ONLY public.sendonce_unsubscribe
    ADD CONSTRAINT sendonce_unsubscribe_pkey PRIMARY KEY (address, topic);

-- CONSTRAINT sendonce_worker sendonce_worker_epoch_key
ALTER TABLE ONLY public.sendonce_worker
    ADD CONSTRAINT sendonce_worker_epoch_key UNIQUE (epoch);

-- CONSTRAINT sendonce_worker sendonce_worker_pkey
ALTER TABLE ONLY public.sendonce_worker
    ADD CONSTRAINT sendonce_worker_pkey PRIMARY KEY (id);

-- INDEX sendonce_batch_unsettled_idx
CREATE INDEX sendonce_batch_unsettled_idx ON public.sendonce_batch USING btree (id) WHERE (state = ANY (ARRAY['pending'::text, 'sending'::text]));

-- INDEX sendonce_event_intent_id_idx
CREATE INDEX sendonce_event_intent_id_idx ON public.sendonce_event USING btree (intent_id) WHERE (intent_id IS NOT NULL);

-- INDEX sendonce_event_unmatched_idx
CREATE INDEX sendonce_event_unmatched_idx ON public.sendonce_event USING btree (received_at) WHERE (intent_id IS NULL);

-- INDEX sendonce_outbox_batch_message_ids_idx
CREATE INDEX sendonce_outbox_batch_message_ids_idx ON public.sendonce_outbox USING gin (string_to_array(message_id, ','::text)) WHERE ((kind = 'batch'::text) AND (message_id IS NOT NULL));

-- INDEX sendonce_outbox_failed_idx
CREATE INDEX sendonce_outbox_failed_idx ON public.sendonce_outbox USING btree (updated_at) WHERE (state = 'failed'::text);

-- INDEX sendonce_outbox_jobbed_idx
CREATE INDEX sendonce_outbox_jobbed_idx ON public.sendonce_outbox USING btree (state, id) WHERE ((state = ANY (ARRAY['pending'::text, 'sending'::text])) AND (job_id IS NOT NULL) AND (batch_key IS NULL));

-- INDEX sendonce_outbox_message_id_idx
CREATE INDEX sendonce_outbox_message_id_idx ON public.sendonce_outbox USING btree (message_id) WHERE (message_id IS NOT NULL);

-- INDEX sendonce_outbox_run_key_idx
CREATE INDEX sendonce_outbox_run_key_idx ON public.sendonce_outbox USING btree (run_key) WHERE (run_key IS NOT NULL);

-- INDEX sendonce_outbox_run_unsettled_idx
CREATE INDEX sendonce_outbox_run_unsettled_idx ON public.sendonce_outbox USING btree (run_key) WHERE ((run_key IS NOT NULL) AND (state = ANY (ARRAY['pending'::text, 'sending'::text])));

-- INDEX sendonce_outbox_tenant_due_idx
CREATE INDEX sendonce_outbox_tenant_due_idx ON public.sendonce_outbox USING btree (((run_key IS NOT NULL)), COALESCE(tenant, ''::text), COALESCE(next_attempt_at, send_at, created_at), id) WHERE ((state = 'pending'::text) AND (job_id IS NULL));

-- INDEX sendonce_outbox_unsettled_idx
CREATE INDEX sendonce_outbox_unsettled_idx ON public.sendonce_outbox USING btree (state, id) WHERE (state = ANY (ARRAY['pending'::text, 'sending'::text]));

-- INDEX sendonce_run_tally_run_key_idx
CREATE INDEX sendonce_run_tally_run_key_idx ON public.sendonce_run_tally USING btree (run_key);

-- INDEX sendonce_tombstone_pruned_at_idx
CREATE INDEX sendonce_tombstone_pruned_at_idx ON public.sendonce_tombstone USING brin (pruned_at);

-- INDEX sendonce_unsubscribe_event_topic_idx
CREATE INDEX sendonce_unsubscribe_event_topic_idx ON public.sendonce_unsubscribe_event USING btree (topic, created_at);

-- TRIGGER sendonce_outbox sendonce_outbox_check
CREATE TRIGGER sendonce_outbox_check BEFORE INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked))) EXECUTE FUNCTION public.sendonce_outbox_check();

-- TRIGGER sendonce_outbox sendonce_outbox_check_update
CREATE TRIGGER sendonce_outbox_check_update AFTER UPDATE OF idempotency_key, kind, payload, template_id ON public.sendonce_outbox FOR EACH ROW EXECUTE FUNCTION public.sendonce_outbox_check();

-- TRIGGER sendonce_outbox sendonce_outbox_key_clock
CREATE TRIGGER sendonce_outbox_key_clock BEFORE INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked) AND (new.idempotency_key ~ '[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]'::text))) EXECUTE FUNCTION public.sendonce_outbox_key_clock();

-- TRIGGER sendonce_outbox sendonce_outbox_notify
CREATE TRIGGER sendonce_outbox_notify AFTER INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked))) EXECUTE FUNCTION public.sendonce_outbox_notify();

-- TRIGGER sendonce_outbox sendonce_outbox_run_key_moved
CREATE TRIGGER sendonce_outbox_run_key_moved AFTER UPDATE OF run_key ON public.sendonce_outbox FOR EACH ROW WHEN ((old.run_key IS DISTINCT FROM new.run_key)) EXECUTE FUNCTION public.sendonce_outbox_run_key_moved();

-- TRIGGER sendonce_outbox sendonce_outbox_run_member
CREATE TRIGGER sendonce_outbox_run_member BEFORE INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked) AND (new.run_key IS NOT NULL))) EXECUTE FUNCTION public.sendonce_outbox_run_member();

-- TRIGGER sendonce_outbox sendonce_outbox_run_tenant
CREATE TRIGGER sendonce_outbox_run_tenant BEFORE INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.run_key IS NOT NULL) AND (NOT new.checked))) EXECUTE FUNCTION public.sendonce_run_tenant();

-- TRIGGER sendonce_outbox sendonce_outbox_run_tenant_update
CREATE TRIGGER sendonce_outbox_run_tenant_update BEFORE UPDATE OF run_key, tenant ON public.sendonce_outbox FOR EACH ROW WHEN (((new.run_key IS NOT NULL) AND ((old.run_key IS DISTINCT FROM new.run_key) OR (old.tenant IS DISTINCT FROM new.tenant)))) EXECUTE FUNCTION public.sendonce_run_tenant();

-- TRIGGER sendonce_outbox sendonce_outbox_run_topic
CREATE TRIGGER sendonce_outbox_run_topic BEFORE INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.topic IS NULL) AND (new.run_key IS NOT NULL))) EXECUTE FUNCTION public.sendonce_run_topic();

-- TRIGGER sendonce_outbox sendonce_outbox_snapshot
CREATE TRIGGER sendonce_outbox_snapshot AFTER INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked) AND (current_setting('transaction_isolation'::text) <> ALL (ARRAY['read committed'::text, 'read uncommitted'::text])))) EXECUTE FUNCTION public.sendonce_outbox_snapshot();

-- TRIGGER sendonce_outbox sendonce_outbox_status_capture
CREATE TRIGGER sendonce_outbox_status_capture AFTER UPDATE ON public.sendonce_outbox REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((current_setting('sendonce.capture'::text, true) = 'on'::text)) EXECUTE FUNCTION public.sendonce_status_changes('capture');

-- TRIGGER sendonce_outbox sendonce_outbox_tally_delete
CREATE TRIGGER sendonce_outbox_tally_delete AFTER DELETE ON public.sendonce_outbox REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.sendonce_outbox_tally();

-- TRIGGER sendonce_outbox sendonce_outbox_tally_insert
CREATE TRIGGER sendonce_outbox_tally_insert AFTER INSERT ON public.sendonce_outbox REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.sendonce_outbox_tally();

-- TRIGGER sendonce_outbox sendonce_outbox_tally_truncate
CREATE TRIGGER sendonce_outbox_tally_truncate AFTER TRUNCATE ON public.sendonce_outbox FOR EACH STATEMENT EXECUTE FUNCTION public.sendonce_outbox_tally_truncate();

-- TRIGGER sendonce_outbox sendonce_outbox_tally_update
CREATE TRIGGER sendonce_outbox_tally_update AFTER UPDATE ON public.sendonce_outbox REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN (
        CASE
            WHEN (current_setting('sendonce.tallied'::text, true) = 'on'::text) THEN (set_config('sendonce.tallied'::text, ''::text, true) IS NULL)
            ELSE true
        END) EXECUTE FUNCTION public.sendonce_outbox_tally();

-- TRIGGER sendonce_outbox sendonce_outbox_tombstone
CREATE TRIGGER sendonce_outbox_tombstone BEFORE INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked))) EXECUTE FUNCTION public.sendonce_outbox_tombstone();

-- TRIGGER sendonce_outbox sendonce_outbox_tombstone_after
CREATE TRIGGER sendonce_outbox_tombstone_after AFTER INSERT ON public.sendonce_outbox FOR EACH ROW WHEN (((new.job_id IS NULL) AND (NOT new.checked))) EXECUTE FUNCTION public.sendonce_outbox_tombstone();

-- TRIGGER sendonce_outbox sendonce_run_breaker
CREATE TRIGGER sendonce_run_breaker AFTER UPDATE OF delivery_status ON public.sendonce_outbox FOR EACH ROW WHEN (((new.run_key IS NOT NULL) AND (old.delivery_status IS DISTINCT FROM new.delivery_status))) EXECUTE FUNCTION public.sendonce_run_breaker();

-- TRIGGER sendonce_run sendonce_run_held
CREATE TRIGGER sendonce_run_held BEFORE INSERT ON public.sendonce_run FOR EACH ROW WHEN ((new.state = 'active'::text)) EXECUTE FUNCTION public.sendonce_run_held();

-- TRIGGER sendonce_run sendonce_run_tenant_fixed
CREATE TRIGGER sendonce_run_tenant_fixed BEFORE UPDATE OF tenant ON public.sendonce_run FOR EACH ROW WHEN ((old.tenant IS DISTINCT FROM new.tenant)) EXECUTE FUNCTION public.sendonce_run_tenant_fixed();

-- TRIGGER sendonce_outbox sendonce_scope_breaker
CREATE TRIGGER sendonce_scope_breaker AFTER UPDATE OF delivery_status ON public.sendonce_outbox FOR EACH ROW WHEN (((new.run_key IS NOT NULL) AND (old.delivery_status IS DISTINCT FROM new.delivery_status))) EXECUTE FUNCTION public.sendonce_scope_breaker();

-- FK CONSTRAINT sendonce_outbox sendonce_outbox_run_key_fkey
ALTER TABLE ONLY public.sendonce_outbox
    ADD CONSTRAINT sendonce_outbox_run_key_fkey FOREIGN KEY (run_key) REFERENCES public.sendonce_run(key);

-- FK CONSTRAINT sendonce_run_outcome sendonce_run_outcome_run_key_fkey
ALTER TABLE ONLY public.sendonce_run_outcome
    ADD CONSTRAINT sendonce_run_outcome_run_key_fkey FOREIGN KEY (run_key) REFERENCES public.sendonce_run(key) ON DELETE CASCADE;
