-- +goose NO TRANSACTION
-- +goose Up
-- Delivery webhooks (issue 16). The OpenEmail API reports what became of a
-- message after it accepted it (delivered, bounced, complained, …) with
-- signed webhook deliveries; package webhook stores each one here, once,
-- and gives the intent that sent the message a delivery status.
--
-- The statements run outside a transaction so that the index on
-- sendonce_outbox is built CONCURRENTLY (a plain CREATE INDEX would hold up
-- every enqueue while it reads the whole table). Each statement can run
-- again, should the migration stop half-way.

-- One row per webhook delivery. delivery_id is the X-OpenEmail-Delivery
-- header, or the event's id when the header is missing: a delivery the API
-- sends again is stored once. email_id is the message the event is about
-- (data.emailId, data.email_id or data.id), occurred_at the event's
-- createdAt (the time received when it has none). intent_id is the intent
-- whose message_id is email_id, once there is one: NULL while the event is
-- unmatched (an event about a message sendonce did not send, or one that
-- arrived before the worker recorded the send).
CREATE TABLE IF NOT EXISTS sendonce_event (
    delivery_id text        PRIMARY KEY,
    event_id    text        NOT NULL,
    type        text        NOT NULL,
    email_id    text,
    occurred_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    raw         jsonb       NOT NULL,
    intent_id   bigint
);

-- The unmatched events, newest first: what the workers' sweeper looks at
-- every second (sendonce_events_match_pending). It holds only unmatched
-- rows, so it stays as small as they are; with none, a sweep reads one
-- empty page.
CREATE INDEX IF NOT EXISTS sendonce_event_unmatched_idx ON sendonce_event (received_at)
    WHERE intent_id IS NULL;

-- The latest meaningful delivery status of an intent, and the time of the
-- event that gave it: delivery_delayed, delivered, failed, bounced,
-- suppressed or complained; NULL until an event says.
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS delivery_status text;
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS delivery_status_at timestamptz;

-- Events find their intent by message id. The mark of a send already
-- rewrites its row outside HOT (it changes state, which an index names), so
-- this index adds one entry per sent intent and no other cost to the
-- rewrite.
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_message_id_idx;
CREATE INDEX CONCURRENTLY sendonce_outbox_message_id_idx ON sendonce_outbox (message_id)
    WHERE message_id IS NOT NULL;

-- The status an event type gives, or NULL for the types that give none
-- (email.opened, email.sent, domain.verified, …: stored, status unchanged).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_delivery_status(event_type text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE event_type
        WHEN 'email.delivery_delayed' THEN 'delivery_delayed'
        WHEN 'email.delivered' THEN 'delivered'
        WHEN 'email.failed' THEN 'failed'
        WHEN 'email.bounced' THEN 'bounced'
        WHEN 'email.suppressed' THEN 'suppressed'
        WHEN 'email.complained' THEN 'complained'
    END
$$;
-- +goose StatementEnd

-- The precedence of the statuses: a status replaces the intent's only if
-- it ranks higher, or ranks the same and its event is later. So a bounce is
-- never undone by a late delivered or delivery_delayed, a complaint wins
-- over everything, and between failed, bounced and suppressed the latest
-- event wins.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_delivery_rank(status text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
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
-- +goose StatementEnd

-- sendonce_delivery_apply gives an intent the status of one event if it
-- outranks the intent's (rank, then the event's time, then the status's
-- name, so that any order of arrival ends with the same status), and
-- notifies sendonce_delivery with {"key": …, "status": …} when it changed.
-- The UPDATE checks the rule on the row it locks, so concurrent events for
-- one intent are applied one after the other.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_delivery_apply(p_intent bigint, p_type text, p_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- sendonce_event_match matches a stored event to its intent and applies
-- its status; it returns the intent's id, or NULL when it stays unmatched.
-- An event that arrives before its send is recorded (or races the record:
-- neither transaction sees the other's uncommitted row) stays unmatched
-- until sendonce_events_match_pending finds its intent.
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

-- sendonce_events_match_pending matches the unmatched events of the last
-- day (newest first, at most max_events, skipping rows another worker
-- holds) whose send has been recorded since, and returns how many it
-- matched. The workers' sweeper calls it every second, so an event that
-- came before its send is applied within a second of the send's record,
-- in any order (the rank rule makes the result the same). Recording a send
-- costs nothing for it: an earlier version matched from a row trigger on
-- every mark, about 6 µs of database time per sent intent in the drain
-- benchmark, paid even with webhooks off.
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

-- +goose Down
DROP FUNCTION IF EXISTS sendonce_events_match_pending(integer);
DROP FUNCTION IF EXISTS sendonce_event_match(text);
DROP FUNCTION IF EXISTS sendonce_delivery_apply(bigint, text, timestamptz);
DROP FUNCTION IF EXISTS sendonce_delivery_rank(text);
DROP FUNCTION IF EXISTS sendonce_delivery_status(text);
DROP INDEX CONCURRENTLY IF EXISTS sendonce_outbox_message_id_idx;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS delivery_status_at;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS delivery_status;
DROP TABLE IF EXISTS sendonce_event;
