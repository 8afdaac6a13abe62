-- +goose Up
-- The library as strict as the command (issue 45).
--
-- A key holding a clock reading is refused for plain-SQL producers as
-- outbox.Enqueue refuses it (outbox.ClockPattern, the same expression): an
-- RFC 3339 date and time with a fraction of a second, as in
-- invoice:2026-12-06T00:12:42.005523823Z. The seeds' first rule for a key:
-- derive it from the cause of the send, never from a clock; a producer that
-- runs again reads the clock again, gets another key, and sends a second
-- time. A time to the second is taken (a schedule's members derive their
-- keys from its run's key, which ends in one). A trigger of its own, whose
-- WHEN holds the expression: the function runs only for a key it refuses,
-- and sendonce_outbox_check is left as it is. Only new rows are checked:
-- rows stored before keep their keys. An empty key was refused already
-- (sendonce_outbox_check: 1 to 255 characters).
--
-- The address rule's last message said the rule twice ("is not an email
-- address of the form local@domain or Display Name <local@domain>; sendonce
-- takes only local@domain and Display Name <local@domain>, …"): the
-- trigger's message (sendonce_check_email) gives the rule after the
-- problem, so the problem is now only "is not an email address", as in Go
-- (suppress.Why).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sendonce_outbox_key_clock() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = format(
        'sendonce: idempotency_key %s holds a clock reading (%s): derive the key from the cause of the send ("invoice:inv_4192"), never from a clock: a producer that runs again reads the clock again, gets another key, and sends a second time',
        quote_literal(left(NEW.idempotency_key, 60)), substring(NEW.idempotency_key FROM '[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9][0-9]*(?:[Zz]|-[0-9]{2}:[0-9]{2})?'));
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sendonce_outbox_key_clock BEFORE INSERT ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.job_id IS NULL AND NOT NEW.checked
        AND NEW.idempotency_key ~ '[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]')
    EXECUTE FUNCTION sendonce_outbox_key_clock();

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
        ELSE 'is not an email address'
    END;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS sendonce_outbox_key_clock ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_outbox_key_clock();
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
