-- +goose NO TRANSACTION
-- +goose Up
-- Delivery webhooks (issue 22, holes 7-9):
--
-- 7. An address's suppression events are applied in the order of their own
--    time (the event's createdAt), not of their arrival: a bounce at t0+10 s
--    that arrives before a suppression.removed from t0 stays on the list.
--    sendonce_suppression_change keeps, per address, the time of the last
--    change applied to it, a removal's too.
-- 8. An event is stored once per signed event id, not per delivery header:
--    the header is not signed, and a captured event posted again under
--    another header (or none) was stored and applied again.
-- 9. A batch intent's events find it by any of its message ids (the
--    worker stores them comma-separated, "em_p,em_q").
--
-- The statements run outside a transaction so that the indexes are built
-- CONCURRENTLY (the one on sendonce_outbox would otherwise hold up every
-- enqueue and every mark while it reads the table). Each statement can run
-- again, should the migration stop half-way.

-- The last change applied to an address's place on the suppression list:
-- when (an event's createdAt, or the time of a change by hand) and whether
-- it took the address off (removed) or put it on. It outlives a removal, so
-- that an older bounce arriving after the removal does not put the address
-- back. One row per address ever suppressed or removed.
CREATE TABLE IF NOT EXISTS sendonce_suppression_change (
    address    text        PRIMARY KEY,
    changed_at timestamptz NOT NULL,
    removed    boolean     NOT NULL
);

-- The addresses an event names: data.to (a string or an array), data.email,
-- data.address and data.recipient, in the list's form, sorted; NULL when it
-- names none. (The payload beyond type and id is undocumented.)
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_addresses(raw jsonb) RETURNS text[]
LANGUAGE sql STABLE AS $$
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
-- +goose StatementEnd

-- sendonce_suppression_set puts addresses on the list (p_removed false, with
-- reason and source) or takes them off, and returns how many it added or
-- removed. p_at is the time of the change: an event's createdAt, applied
-- to an address only if it is later than the last change applied to it;
-- at the same instant an addition wins over a removal (the safer side: not
-- mailing an address that bounced), whatever the order of arrival. A NULL
-- p_at is a change by hand (ob.Suppress, ob.Unsuppress, `sendonce
-- suppression add/remove`): it is made now and always applies, also over
-- an event stamped ahead of the database's clock (the operator asked), and
-- it counts as later than every change before it.
--
-- The change row is written first: its lock orders the changes of one
-- address, so of two concurrent events the later one's change is the one
-- that stays. Addresses are locked in sorted order.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_suppression_set(p_addrs text[], p_removed boolean, p_reason text, p_source text,
    p_at timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- What the list's changes were before this migration, from the events that
-- made them (by their createdAt, the later winning, an addition at a tie)
-- and the list itself. The list is kept as it is; where it disagrees with
-- the last event (an address added or removed by hand since), the change
-- is the list's: on it since its entry was made, or off it since now.
-- +goose StatementBegin
INSERT INTO sendonce_suppression_change (address, changed_at, removed)
SELECT coalesce(s.address, c.address),
    CASE
        WHEN c.address IS NULL THEN s.created_at
        WHEN (s.address IS NULL) = c.removed THEN c.at
        WHEN s.address IS NULL THEN greatest(c.at, now())
        ELSE greatest(c.at, s.created_at)
    END,
    s.address IS NULL
FROM (
    SELECT DISTINCT ON (a) a AS address, at, removed
    FROM (
        SELECT a, e.occurred_at AS at, e.type = 'suppression.removed' AS removed
        FROM sendonce_event e
        LEFT JOIN sendonce_outbox o ON o.id = e.intent_id AND o.kind IN ('email', 'template'),
        LATERAL unnest(coalesce(sendonce_event_addresses(e.raw), CASE WHEN e.type LIKE 'email.%' THEN
            ARRAY(SELECT r FROM sendonce_recipients(o.kind, o.payload) AS r WHERE r LIKE '_%@_%' AND length(r) <= 320) END)) AS a
        WHERE e.suppression_applied AND e.type IN ('email.bounced', 'email.complained', 'email.suppressed',
            'suppression.added', 'suppression.removed')
    ) x
    ORDER BY a, at DESC, removed
) c
FULL JOIN sendonce_suppression s ON s.address = c.address
ON CONFLICT (address) DO NOTHING;
-- +goose StatementEnd

-- An event stored twice under two delivery ids (the same signed event
-- posted again under another header) is kept once: the copy matched to
-- its intent, else the first received; applied to the list if either was.
-- +goose StatementBegin
WITH twice AS (
    SELECT delivery_id, suppression_applied,
        row_number() OVER w AS n,
        bool_or(suppression_applied) OVER (PARTITION BY event_id) AS applied
    FROM sendonce_event
    WHERE event_id IN (SELECT event_id FROM sendonce_event GROUP BY event_id HAVING count(*) > 1)
    WINDOW w AS (PARTITION BY event_id ORDER BY intent_id IS NULL, received_at, delivery_id)
), kept AS (
    UPDATE sendonce_event e SET suppression_applied = true
    FROM twice t WHERE e.delivery_id = t.delivery_id AND t.n = 1 AND t.applied AND NOT t.suppression_applied
)
DELETE FROM sendonce_event e USING twice t WHERE e.delivery_id = t.delivery_id AND t.n > 1;
-- +goose StatementEnd

-- The event id, signed, is the key; delivery_id stays as a column (the
-- header the event first came with, or its id when it came with none), for
-- the API's delivery log and the suppression list's source.
DROP INDEX CONCURRENTLY IF EXISTS sendonce_event_event_id_key;
CREATE UNIQUE INDEX CONCURRENTLY sendonce_event_event_id_key ON sendonce_event (event_id);

-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
            WHERE i.indrelid = 'sendonce_event'::regclass AND i.indisprimary) = 'event_id' THEN
        -- Run again after it was done: the index just built is a second copy.
        DROP INDEX sendonce_event_event_id_key;
    ELSE
        ALTER TABLE sendonce_event DROP CONSTRAINT sendonce_event_pkey,
            ADD CONSTRAINT sendonce_event_pkey PRIMARY KEY USING INDEX sendonce_event_event_id_key;
    END IF;
END
$$;
-- +goose StatementEnd

-- A batch intent's message ids, one index entry each. Only batch intents
-- with a message id have entries: for every other row the mark's rewrite
-- (not HOT already: it changes state, which an index names) only checks
-- the predicate, and nothing is added to the claim or the mark.
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_batch_message_ids_idx;
CREATE INDEX CONCURRENTLY sendonce_outbox_batch_message_ids_idx ON sendonce_outbox
    USING gin (string_to_array(message_id, ',')) WHERE kind = 'batch' AND message_id IS NOT NULL;

-- sendonce_message_intent returns the intent that sent a message: the one
-- whose message_id it is, or the batch intent with it among its ids (the
-- first by id, should there be several); NULL when none.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_message_intent(p_email_id text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT min(id) FROM (
        SELECT id FROM sendonce_outbox WHERE message_id = p_email_id AND kind <> 'batch'
        UNION ALL
        SELECT id FROM sendonce_outbox
        WHERE kind = 'batch' AND message_id IS NOT NULL AND string_to_array(message_id, ',') @> ARRAY[p_email_id]
    ) m);
END
$$;
-- +goose StatementEnd

-- sendonce_event_suppress as in 00008, by event id, and each address
-- changed only by an event later than its last change
-- (sendonce_suppression_set).
DROP FUNCTION IF EXISTS sendonce_event_suppress(text);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_suppress(p_event_id text) RETURNS integer
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- sendonce_event_match as in 00008, by event id, finding a batch intent by
-- any of its message ids.
DROP FUNCTION IF EXISTS sendonce_event_match(text);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_match(p_event_id text) RETURNS bigint
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- sendonce_events_match_pending as in 00007, by event id, and an event
-- about one message of a batch intent is found too. The intent is looked up
-- per unmatched event by sendonce_message_intent, two index probes whatever
-- the statistics: written as an EXISTS, the probe of the batch ids was
-- planned, before the new index's expression had been analyzed, as a scan
-- of the whole outbox per unmatched event (a sweep of 2,000 unmatched
-- events over 50,000 intents took 79 s under EXPLAIN ANALYZE).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_events_match_pending(max_events integer) RETURNS integer
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_events_match_pending(max_events integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ev record;
    n  integer := 0;
BEGIN
    FOR ev IN SELECT e.delivery_id FROM sendonce_event e
        WHERE e.intent_id IS NULL AND e.received_at > now() - interval '1 day'
            AND e.email_id IS NOT NULL
            AND EXISTS (SELECT 1 FROM sendonce_outbox o WHERE o.message_id = e.email_id)
        ORDER BY e.received_at DESC LIMIT max_events
        FOR UPDATE OF e SKIP LOCKED
    LOOP
        IF sendonce_event_match(ev.delivery_id) IS NOT NULL THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS sendonce_event_match(text);
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
DROP FUNCTION IF EXISTS sendonce_event_suppress(text);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_event_suppress(p_delivery_id text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ev     sendonce_event;
    reason text;
    addrs  text[];
    n      integer := 0;
BEGIN
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
            RETURN 0;
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
DROP FUNCTION IF EXISTS sendonce_message_intent(text);
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_batch_message_ids_idx;
-- Back to one row per delivery id: of an event id's rows with one
-- delivery id (a header sent with more than one event), the first received
-- stays.
-- +goose StatementBegin
DELETE FROM sendonce_event e USING (
    SELECT event_id, row_number() OVER (PARTITION BY delivery_id ORDER BY received_at, event_id) AS n
    FROM sendonce_event
    WHERE delivery_id IN (SELECT delivery_id FROM sendonce_event GROUP BY delivery_id HAVING count(*) > 1)
) t WHERE e.event_id = t.event_id AND t.n > 1;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS sendonce_event_delivery_id_key;
CREATE UNIQUE INDEX CONCURRENTLY sendonce_event_delivery_id_key ON sendonce_event (delivery_id);
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
            WHERE i.indrelid = 'sendonce_event'::regclass AND i.indisprimary) = 'delivery_id' THEN
        DROP INDEX sendonce_event_delivery_id_key;
    ELSE
        ALTER TABLE sendonce_event DROP CONSTRAINT sendonce_event_pkey,
            ADD CONSTRAINT sendonce_event_pkey PRIMARY KEY USING INDEX sendonce_event_delivery_id_key;
    END IF;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS sendonce_suppression_set(text[], boolean, text, text, timestamptz);
DROP FUNCTION IF EXISTS sendonce_event_addresses(jsonb);
DROP TABLE IF EXISTS sendonce_suppression_change;
