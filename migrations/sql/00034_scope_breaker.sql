-- +goose Up
-- The bounce-rate breaker of topics and tenants (issue 47, item 1): the
-- bulk sending of a topic, or of a tenant, pauses itself when the
-- hard-bounce or complaint rate of its bulk sends (members of runs) whose
-- delivery status is known reaches its threshold, after a minimum of known
-- outcomes, as a run's does (00033). Bulk sending is the runs': every
-- active run of the topic (or tenant) with members left to send is paused,
-- in the transaction that records the outcome crossing the threshold,
-- with the reason and the figures; a run made while the breaker holds is
-- paused from its start. Transactional intents (no run) are never paused,
-- nor counted.
--
-- sendonce_breaker holds the settings: a row per topic or tenant ('' the
-- default tenant) that has its own, and one named '*' per scope for the
-- scope's defaults; without either, the providers' review levels as a
-- run's (5% bounces, 0.1% complaints) over 1,000 known outcomes, ten times
-- a run's minimum: a run's own breaker stops one stale list after 100;
-- its topic's or tenant's judges the runs together (many small runs, each
-- under its minimum), and pausing them all needs more evidence. off
-- turns it off. The counts are all the outcomes since the last resume.
CREATE TABLE sendonce_breaker (
    scope          text NOT NULL CONSTRAINT sendonce_breaker_scope_check CHECK (scope IN ('topic', 'tenant')),
    name           text NOT NULL,
    off            boolean NOT NULL DEFAULT false,
    bounce_rate    double precision NOT NULL DEFAULT 0.05
        CONSTRAINT sendonce_breaker_bounce_rate_check CHECK (bounce_rate > 0 AND bounce_rate <= 1),
    complaint_rate double precision NOT NULL DEFAULT 0.001
        CONSTRAINT sendonce_breaker_complaint_rate_check CHECK (complaint_rate > 0 AND complaint_rate <= 1),
    min_outcomes   integer NOT NULL DEFAULT 1000 CONSTRAINT sendonce_breaker_min_outcomes_check CHECK (min_outcomes >= 1),
    changed_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);

-- sendonce_breaker_state is each topic's or tenant's judgement: the counts
-- of the last resume (the breaker judges only the outcomes after them),
-- and the trip that holds its bulk sending paused (tripped_at and reason
-- NULL: none), with its figures. A row comes with the first trip.
CREATE TABLE sendonce_breaker_state (
    scope            text NOT NULL,
    name             text NOT NULL,
    since_known      bigint NOT NULL DEFAULT 0,
    since_hard       bigint NOT NULL DEFAULT 0,
    since_complained bigint NOT NULL DEFAULT 0,
    tripped_at       timestamptz,
    reason           text,
    trip_known       bigint,
    trip_hard        bigint,
    trip_complained  bigint,
    PRIMARY KEY (scope, name)
);

-- The counts, split over 16 rows per topic or tenant by the backend's pid,
-- as sendonce_run_outcome's are.
CREATE TABLE sendonce_breaker_outcome (
    scope      text NOT NULL,
    name       text NOT NULL,
    shard      smallint NOT NULL,
    known      bigint NOT NULL DEFAULT 0,
    hard       bigint NOT NULL DEFAULT 0,
    complained bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, name, shard)
);

-- sendonce_scope_breaker counts a run member's change of delivery status
-- for its topic (if it has one) and its tenant, then judges each that is
-- not tripped already; a trip pauses the scope's active runs with members
-- left to send, each noted in sendonce.breaker_trips for the statement
-- that applied the event to log, as sendonce_run_breaker does.
-- +goose StatementBegin
CREATE FUNCTION sendonce_scope_breaker() RETURNS trigger
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

CREATE TRIGGER sendonce_scope_breaker AFTER UPDATE OF delivery_status ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.run_key IS NOT NULL AND OLD.delivery_status IS DISTINCT FROM NEW.delivery_status)
    EXECUTE FUNCTION sendonce_scope_breaker();

-- A run made while its topic's or tenant's breaker holds is paused from
-- its start, with the breaker's reason.
-- +goose StatementBegin
CREATE FUNCTION sendonce_run_held() RETURNS trigger
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

CREATE TRIGGER sendonce_run_held BEFORE INSERT ON sendonce_run
    FOR EACH ROW WHEN (NEW.state = 'active') EXECUTE FUNCTION sendonce_run_held();

-- +goose Down
DROP TRIGGER IF EXISTS sendonce_run_held ON sendonce_run;
DROP FUNCTION IF EXISTS sendonce_run_held();
DROP TRIGGER IF EXISTS sendonce_scope_breaker ON sendonce_outbox;
DROP FUNCTION IF EXISTS sendonce_scope_breaker();
DROP TABLE IF EXISTS sendonce_breaker_outcome;
DROP TABLE IF EXISTS sendonce_breaker_state;
DROP TABLE IF EXISTS sendonce_breaker;
