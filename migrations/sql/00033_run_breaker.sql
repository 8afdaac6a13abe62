-- +goose Up
-- The bounce-rate breaker of runs (issue 47, item 1): a run whose members'
-- hard-bounce or complaint rate, over the members whose delivery status
-- the webhooks made known, reaches its threshold after a minimum of known
-- outcomes pauses itself, in the transaction that records the outcome
-- crossing it.
--
-- The settings are columns of the run: a rate of NULL is not watched
-- (both NULL: the breaker is off). The defaults are the providers' review
-- levels (Amazon SES reviews an account at 5% bounces or 0.1% complaints)
-- and 100 known outcomes. A run made before this migration gets them too.
--
-- The outbox is locked first (in the mode its trigger's creation takes),
-- then the runs, in the order the workers' statements and 00030 take
-- them: locked the other way round, a plain INSERT of an intent during
-- the migration deadlocked with it (TestUpgradeWhileWorking).
LOCK TABLE sendonce_outbox IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE sendonce_run
    ADD COLUMN breaker_bounce_rate double precision DEFAULT 0.05
        CONSTRAINT sendonce_run_breaker_bounce_rate_check CHECK (breaker_bounce_rate > 0 AND breaker_bounce_rate <= 1),
    ADD COLUMN breaker_complaint_rate double precision DEFAULT 0.001
        CONSTRAINT sendonce_run_breaker_complaint_rate_check CHECK (breaker_complaint_rate > 0 AND breaker_complaint_rate <= 1),
    ADD COLUMN breaker_min_outcomes integer NOT NULL DEFAULT 100
        CONSTRAINT sendonce_run_breaker_min_outcomes_check CHECK (breaker_min_outcomes >= 1),
    -- When the settings were last changed by hand (a resume compares it
    -- with the trip's time).
    ADD COLUMN breaker_changed_at timestamptz,
    -- The counts when the run was last resumed from a trip: the breaker
    -- judges only the outcomes after them.
    ADD COLUMN breaker_since_known bigint NOT NULL DEFAULT 0,
    ADD COLUMN breaker_since_hard bigint NOT NULL DEFAULT 0,
    ADD COLUMN breaker_since_complained bigint NOT NULL DEFAULT 0,
    -- Why the run is paused, when the breaker paused it (NULL otherwise;
    -- a resume clears it), and the figures of the last trip.
    ADD COLUMN pause_reason text,
    ADD COLUMN breaker_tripped_at timestamptz,
    ADD COLUMN breaker_trip_known bigint,
    ADD COLUMN breaker_trip_hard bigint,
    ADD COLUMN breaker_trip_complained bigint;

-- The counts the breaker judges: a run's members whose delivery status is
-- known (delivered, bounced, complained), bounced and complained, kept
-- exact by a trigger on each change of a member's delivery status. Not
-- the runs' tally (sendonce_run_tally): that is a ledger of deltas,
-- compacted every minute, so a read of one run's counts sums every row
-- appended since (two per webhook event), where this one reads at most 16
-- rows. One row per run and shard, the shard the backend's pid modulo 16:
-- concurrent webhook transactions of one run update different rows, and
-- wait for each other's commit no more than one in 16 times.
CREATE TABLE sendonce_run_outcome (
    run_key text NOT NULL REFERENCES sendonce_run (key) ON DELETE CASCADE,
    shard smallint NOT NULL,
    known bigint NOT NULL DEFAULT 0,
    hard bigint NOT NULL DEFAULT 0,
    complained bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_key, shard)
);

-- sendonce_run_breaker counts a run member's change of delivery status,
-- then judges its run: past a threshold, with at least the minimum of known
-- outcomes since the last resume from a trip, an active run with members
-- still to send is paused, with the reason and the figures. Every run
-- tripped in the transaction is noted in sendonce.breaker_trips ("key TAB
-- reason" lines) for the statement that applied the event to log.
--
-- Every email.bounced counts as a hard bounce: the API's contract gives
-- the body no hard/soft distinction (the fake sends none), and the
-- delivery status keeps none.
--
-- Concurrent webhook transactions do not see each other's counts: the
-- trip can come as many events late as there are transactions of the run
-- in flight at once (the webhook handler's concurrency), never later.
-- +goose StatementBegin
CREATE FUNCTION sendonce_run_breaker() RETURNS trigger
LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd

-- Only sendonce_delivery_apply sets delivery_status: no statement of the
-- drain (claim, mark) fires it.
CREATE TRIGGER sendonce_run_breaker AFTER UPDATE OF delivery_status ON sendonce_outbox
    FOR EACH ROW WHEN (NEW.run_key IS NOT NULL AND OLD.delivery_status IS DISTINCT FROM NEW.delivery_status)
    EXECUTE FUNCTION sendonce_run_breaker();

-- The members' outcomes so far, counted after the trigger exists (its
-- creation locks out writers of the outbox until this commits).
INSERT INTO sendonce_run_outcome (run_key, shard, known, hard, complained)
SELECT run_key, 0, count(*) FILTER (WHERE delivery_status IN ('delivered', 'bounced', 'complained')),
    count(*) FILTER (WHERE delivery_status = 'bounced'), count(*) FILTER (WHERE delivery_status = 'complained')
FROM sendonce_outbox WHERE run_key IS NOT NULL AND delivery_status IN ('delivered', 'bounced', 'complained')
GROUP BY run_key;

-- +goose Down
DROP TRIGGER sendonce_run_breaker ON sendonce_outbox;
DROP FUNCTION sendonce_run_breaker();
DROP TABLE sendonce_run_outcome;
ALTER TABLE sendonce_run
    DROP COLUMN breaker_bounce_rate, DROP COLUMN breaker_complaint_rate, DROP COLUMN breaker_min_outcomes,
    DROP COLUMN breaker_changed_at, DROP COLUMN breaker_since_known, DROP COLUMN breaker_since_hard,
    DROP COLUMN breaker_since_complained, DROP COLUMN pause_reason, DROP COLUMN breaker_tripped_at,
    DROP COLUMN breaker_trip_known, DROP COLUMN breaker_trip_hard, DROP COLUMN breaker_trip_complained;
