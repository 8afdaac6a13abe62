-- +goose Up
-- The address rule (issue 22). The API reads a recipient with RFC 5322's
-- grammar, which spells one address many ways ("ada@example.com (Ada)",
-- "\"ada\"@example.com", a tab before it, "Ada <ada@example.com> (work)"),
-- and the suppression list missed every spelling but "Name <addr>": with
-- ada@example.com suppressed, those were mailed. Now an intent may name a
-- recipient only in a spelling one regular expression reads, the same text
-- here and in Go (internal/base/suppress, whose test compares the two):
--
--   local@domain   <local@domain>   Display Name <local@domain>
--
-- with spaces (U+0020) around; the display name unquoted or quoted as a
-- whole; local a dot-atom of ASCII atext; domain labels of ASCII letters,
-- digits and hyphens (an internationalised domain in its xn-- form); at
-- most 320 characters. The normal form is local@domain in ASCII lower case
-- (lower() in the C collation, which maps ASCII letters only, whatever the
-- database's locale: in a Turkish one, plain lower('I') is not 'i'). The
-- insert's trigger refuses every other spelling, naming the field and the
-- value, and so does the Go API.
--
-- The pattern, piece by piece (Go: internal/base/suppress/address.go):
--   atext    = -A-Za-z0-9!#$%&'*+/=?^_`{|}~
--   dotAtom  = [atext]+(?:\.[atext]+)*
--   label    = [-A-Za-z0-9]+
--   addrSpec = dotAtom@label(?:\.label)*
--   nonASCII = \u00A1-\u167F … \uFF00-\U0010FFFF: all but the C1 controls,
--              the spaces other than U+0020 and the invisible format
--              characters
--   word     = [atext.nonASCII]+            phrase = word(?: +word)*
--   quoted   = "(?:[ !#-Z^-~nonASCII]|\[|\]|\\[ -~])*"
--   form     = ^ *(?:(addrSpec)|(?:(?:phrase|quoted) *)?<(addrSpec)>) *$
-- Every string it takes it parses one way only, so the address is where
-- sendonce_address_part (and Go's spell) takes it from, and the match
-- needs no captures (its two groups serve Go's tests).

-- Whether a spelling is one the rule takes (any length). The match is all
-- PostgreSQL's engine does, without captures, which it answers from its
-- automaton alone.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_address_spelled(a text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT a COLLATE "C" ~ $re$^ *(?:([-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+(?:\.[-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+)*@[-A-Za-z0-9]+(?:\.[-A-Za-z0-9]+)*)|(?:(?:[-A-Za-z0-9!#$%&'*+/=?^_`{|}~.\u00A1-\u167F\u1681-\u1FFF\u2010-\u2027\u2030-\u205E\u2070-\u2FFF\u3001-\uFEFE\uFF00-\U0010FFFF]+(?: +[-A-Za-z0-9!#$%&'*+/=?^_`{|}~.\u00A1-\u167F\u1681-\u1FFF\u2010-\u2027\u2030-\u205E\u2070-\u2FFF\u3001-\uFEFE\uFF00-\U0010FFFF]+)*|"(?:[ !#-Z^-~\u00A1-\u167F\u1681-\u1FFF\u2010-\u2027\u2030-\u205E\u2070-\u2FFF\u3001-\uFEFE\uFF00-\U0010FFFF]|\[|\]|\\[ -~])*") *)?<([-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+(?:\.[-A-Za-z0-9!#$%&'*+/=?^_`{|}~]+)*@[-A-Za-z0-9]+(?:\.[-A-Za-z0-9]+)*)>) *$$re$
$fn$;
-- +goose StatementEnd

-- The address part of a spelling: between its last "<" and the ">" after
-- it, or all of it but the spaces around. Of a spelling the rule takes,
-- that is the address it names, since the grammar reads each one way only
-- (as Go's spell takes it).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_address_part(a text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(a, '<') > 0 THEN split_part(reverse(split_part(reverse(a), '<', 1)), '>', 1)
        ELSE btrim(a, ' ') END
$$;
-- +goose StatementEnd

-- The normal form of a recipient, the form sendonce_suppression holds, or
-- NULL for a spelling sendonce does not take. The first claim's lookup
-- (sendonce_suppressed, through sendonce_email_recipients) and the
-- webhooks (sendonce_event_suppress) normalise with it. It and the two
-- above are single expressions, which PostgreSQL inlines where they are
-- called (a call of a function that is not costs more than the match).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_address(a text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN sendonce_address_spelled(a) AND length(sendonce_address_part(a)) <= 320
        THEN lower(sendonce_address_part(a) COLLATE "C") END
$$;
-- +goose StatementEnd

-- What is wrong with a spelling sendonce_address refuses, for the
-- trigger's message: the checks of Go's suppress.Why, in its order.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_address_problem(a text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
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
        ELSE 'is not an email address of the form local@domain or Display Name <local@domain>'
    END;
END
$$;
-- +goose StatementEnd

-- sendonce_check_email as in 00001, and each recipient in to, cc and bcc
-- must be a spelling sendonce_address takes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_check_email(body jsonb, prefix text, needs_content boolean) RETURNS void
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- Addresses put on the list under the old rule that the new one does not
-- take (only the webhooks could put most there, and Suppress a quoted
-- local part) can match no recipient any more: no recipient's normal form
-- is such a string. Each is replaced by the address it names where taking
-- away what RFC 5322 ignores (comments, whitespace around, the quotes of a
-- quoted local part that needs none) leaves a spelling the rule takes, and
-- dropped otherwise, so that the list's check holds for every row again
-- (and a dump of the table restores).
INSERT INTO sendonce_suppression (address, reason, source, created_at)
SELECT DISTINCT ON (n) n, reason, source, created_at
FROM (
    SELECT sendonce_address(regexp_replace(
               btrim(regexp_replace(address, '\([^()]*\)', '', 'g'), E' \t\r\n'),
               '^"([-A-Za-z0-9!#$%&''*+/=?^_`{|}~.]+)"@', '\1@')) AS n, reason, source, created_at
    FROM sendonce_suppression
    WHERE sendonce_address(address) IS DISTINCT FROM address
) s
WHERE n IS NOT NULL
ORDER BY n, created_at
ON CONFLICT (address) DO NOTHING;
DELETE FROM sendonce_suppression WHERE sendonce_address(address) IS DISTINCT FROM address;

-- PostgreSQL checks the list's rows against the new function only when
-- the constraint is added again.
ALTER TABLE sendonce_suppression DROP CONSTRAINT sendonce_suppression_address_check,
    ADD CONSTRAINT sendonce_suppression_address_check
        CHECK (address = sendonce_address(address) AND address LIKE '_%@_%' AND length(address) <= 320);

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_address(a text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT nullif(lower(btrim(coalesce(substring(a FROM '<([^<>]*)>\s*$'), a))), '')
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_check_email(body jsonb, prefix text, needs_content boolean) RETURNS void
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
DROP FUNCTION IF EXISTS sendonce_address_problem(text);
DROP FUNCTION IF EXISTS sendonce_address_part(text);
DROP FUNCTION IF EXISTS sendonce_address_spelled(text);
