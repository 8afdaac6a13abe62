-- +goose Up
-- Topics and one-click unsubscribe (issue 28, RFC 8058).
--
-- topic:            what an intent is about for its recipient ('digest',
--                   'product-news'); NULL for a transactional send. A short
--                   lowercase token (outbox.Intent.Topic checks the same
--                   rule). A broadcast goes to an audience the API keeps,
--                   and the API's own unsubscribe: no topic.
-- list_unsubscribe: the List-Unsubscribe headers the first claim froze for
--                   an intent with a topic (an object of headers; for a
--                   batch, an array of one per email), sent on every
--                   attempt so that a replay sends the same bytes.
ALTER TABLE sendonce_outbox ADD COLUMN IF NOT EXISTS topic text,
    ADD COLUMN IF NOT EXISTS list_unsubscribe jsonb;
ALTER TABLE sendonce_outbox DROP CONSTRAINT IF EXISTS sendonce_outbox_topic_check,
    ADD CONSTRAINT sendonce_outbox_topic_check
        CHECK (topic IS NULL OR (topic ~ '^[a-z][a-z0-9_-]{0,63}$' AND kind <> 'broadcast'));

-- A run's topic is its members' (those without one of their own), and a
-- schedule's the topic of the runs it creates.
ALTER TABLE sendonce_run ADD COLUMN IF NOT EXISTS topic text;
ALTER TABLE sendonce_run DROP CONSTRAINT IF EXISTS sendonce_run_topic_check,
    ADD CONSTRAINT sendonce_run_topic_check CHECK (topic ~ '^[a-z][a-z0-9_-]{0,63}$');
ALTER TABLE sendonce_schedule ADD COLUMN IF NOT EXISTS topic text;
ALTER TABLE sendonce_schedule DROP CONSTRAINT IF EXISTS sendonce_schedule_topic_check,
    ADD CONSTRAINT sendonce_schedule_topic_check CHECK (topic ~ '^[a-z][a-z0-9_-]{0,63}$');

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_run_topic() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind <> 'broadcast' THEN
        NEW.topic := (SELECT r.topic FROM sendonce_run r WHERE r.key = NEW.run_key);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS sendonce_outbox_run_topic ON sendonce_outbox;
CREATE TRIGGER sendonce_outbox_run_topic BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.topic IS NULL AND NEW.run_key IS NOT NULL)
    EXECUTE FUNCTION sendonce_run_topic();

-- The suppression list per topic: an address that unsubscribed from a
-- topic gets none of its intents, and every other intent still. (A bounce
-- or complaint stays on sendonce_suppression, for every intent.)
CREATE TABLE IF NOT EXISTS sendonce_unsubscribe (
    address    text        NOT NULL,
    topic      text        NOT NULL,
    source     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (address, topic),
    CONSTRAINT sendonce_unsubscribe_address_check
        CHECK (address = sendonce_address(address) AND address LIKE '_%@_%' AND length(address) <= 320),
    CONSTRAINT sendonce_unsubscribe_topic_check CHECK (topic ~ '^[a-z][a-z0-9_-]{0,63}$')
);

-- Every unsubscribe and resubscribe, as it happened: who, which topic,
-- when, and from where (one-click: a mailbox provider's POST; page: the
-- confirmation page's button; manual: sendonce suppression add/remove).
CREATE TABLE IF NOT EXISTS sendonce_unsubscribe_event (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    address    text        NOT NULL,
    topic      text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('unsubscribed', 'resubscribed')),
    source     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sendonce_unsubscribe_event_topic_idx ON sendonce_unsubscribe_event (topic, created_at);

-- The suppressed recipients of an intent of a topic: those on the global
-- list and those unsubscribed from the topic, sorted, or NULL when none is.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_suppressed(kind text, payload jsonb, topic text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT array_agg(DISTINCT a ORDER BY a) FROM (
        SELECT s.address AS a
        FROM sendonce_recipients(kind, payload) AS r
        JOIN sendonce_suppression s ON s.address = r
        UNION ALL
        SELECT u.address
        FROM sendonce_recipients(kind, payload) AS r
        JOIN sendonce_unsubscribe u ON u.address = r AND u.topic = $3
        WHERE $3 IS NOT NULL
    ) x
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS sendonce_suppressed(text, jsonb, text);
DROP TABLE IF EXISTS sendonce_unsubscribe_event;
DROP TABLE IF EXISTS sendonce_unsubscribe;
DROP TRIGGER IF EXISTS sendonce_outbox_run_topic ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_run_topic();
ALTER TABLE sendonce_schedule DROP COLUMN IF EXISTS topic;
ALTER TABLE sendonce_run DROP COLUMN IF EXISTS topic;
ALTER TABLE sendonce_outbox DROP COLUMN IF EXISTS list_unsubscribe, DROP COLUMN IF EXISTS topic;
