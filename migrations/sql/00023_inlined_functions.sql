-- +goose Up
-- Functions the planner can inline, and a suppression lookup it plans with
-- the claim (issue 26).
--
-- PostgreSQL inlines a SQL function into the statement that calls it only
-- when the function is declared no less volatile than its body. An
-- IMMUTABLE function whose body calls a STABLE one (convert_to,
-- jsonb_build_array) is run by the SQL-function executor instead: a plan
-- started and ended for every call, and every SQL function it calls in
-- turn planned again each time. So it was for sendonce_key_hash and
-- sendonce_intent_hash, which a prune computes for every row it deletes.
-- Their bodies are unchanged, so are their results (the tombstones'
-- hashes); no index or generated column uses them, which is what IMMUTABLE
-- would be for. Per row, jit off: sendonce_key_hash 4.9 µs, 2.1 µs
-- inlined; sendonce_intent_hash 8.3 µs, 5.2 µs.
ALTER FUNCTION sendonce_key_hash(text) STABLE;
ALTER FUNCTION sendonce_intent_hash(text, text, jsonb) STABLE;

-- An intent's recipients: sendonce_address of each string in to, cc and
-- bcc (of each email of a batch), as one jsonb array of the strings from
-- jsonpath (lax: a single string or an array of them). The old bodies gave
-- the same addresses, and a NULL for each value that was not a string,
-- which no caller could use; they called jsonb_build_array (STABLE) and
-- nested set-returning functions, so they were never inlined, and inlined
-- they would make the planner expect 100 emails of 100 recipients each: a
-- claim that looks its intents up on the suppression list was estimated
-- past jit_above_cost and compiled for 1.3 s. Now one function scan,
-- estimated at 100 recipients.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_email_recipients(body jsonb) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT sendonce_address(r)
    FROM jsonb_array_elements_text(
        jsonb_path_query_array(body, 'lax $.to ? (@.type() == "string")')
        || jsonb_path_query_array(body, 'lax $.cc ? (@.type() == "string")')
        || jsonb_path_query_array(body, 'lax $.bcc ? (@.type() == "string")')) AS r
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_recipients(kind text, payload jsonb) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE AS $$
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
$$;
-- +goose StatementEnd

-- sendonce_suppressed_addresses is what sendonce_suppressed aggregates:
-- an intent's recipients on the suppression list, and those unsubscribed
-- from its topic (an address may come twice; callers aggregate DISTINCT).
-- A scalar SQL function that reads tables is never inlined, so every call
-- of sendonce_suppressed started a plan of its own, which the first claim
-- of every intent paid as soon as one address was on the list; the claim
-- aggregates this set in a subquery planned with the statement instead.
-- The recipients are gathered into an array and looked up with = ANY, one
-- index scan of the list however long it is (a join let the planner hash
-- the whole list for every intent). With 10,000 addresses on the list, per
-- intent, jit off: 14 µs (sendonce_suppressed: 255 µs before, 34 µs now).
-- +goose StatementBegin
CREATE FUNCTION sendonce_suppressed_addresses(kind text, payload jsonb, topic text) RETURNS SETOF text
    LANGUAGE sql STABLE AS $$
    SELECT s.address FROM sendonce_suppression s
    WHERE s.address = ANY (ARRAY(SELECT r FROM sendonce_recipients(kind, payload) AS r))
    UNION ALL
    SELECT u.address FROM sendonce_unsubscribe u
    WHERE $3 IS NOT NULL AND u.topic = $3
        AND u.address = ANY (ARRAY(SELECT r FROM sendonce_recipients(kind, payload) AS r))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_suppressed(kind text, payload jsonb, topic text) RETURNS text[]
    LANGUAGE sql STABLE AS $$
    SELECT array_agg(DISTINCT a ORDER BY a) FROM sendonce_suppressed_addresses(kind, payload, topic) AS a
$$;
-- +goose StatementEnd

-- +goose Down
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
DROP FUNCTION IF EXISTS sendonce_suppressed_addresses(text, jsonb, text);
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
ALTER FUNCTION sendonce_intent_hash(text, text, jsonb) IMMUTABLE;
ALTER FUNCTION sendonce_key_hash(text) IMMUTABLE;
