-- +goose Up
-- A schedule whose occurrence cannot be created (its statement errors, its
-- Go producer fails) no longer stops the tick (issue 22): the failure is
-- recorded on the schedule, the tick goes on to the other due schedules,
-- and the failing one is tried again after a backoff, not on every tick.
--
-- failures:   failed attempts at the due occurrence in a row; 0 once one
--             succeeds.
-- last_error: the last failed attempt's error; NULL once one succeeds.
-- failed_at:  when it failed.
-- retry_at:   the schedule is not tried again before this; NULL when
--             healthy.
--
-- Columns with a constant default or none rewrite nothing.
ALTER TABLE sendonce_schedule
    ADD COLUMN failures   integer NOT NULL DEFAULT 0,
    ADD COLUMN last_error text,
    ADD COLUMN failed_at  timestamptz,
    ADD COLUMN retry_at   timestamptz;

-- +goose Down
ALTER TABLE sendonce_schedule
    DROP COLUMN failures,
    DROP COLUMN last_error,
    DROP COLUMN failed_at,
    DROP COLUMN retry_at;
