-- +goose Up
-- What the worker needs to keep its promise through crashes, restarts and
-- operators' retries.
--
-- uncertain: some attempt's outcome is unknown (a network error, a 5xx, a
--   timeout, a shutdown or a crash cut it off), so the API may hold a
--   delivery under this key. Only such an intent can be delivered twice by a
--   send after the API's idempotency window.
-- claimed_by: the worker instance that claimed the intent last. It holds a
--   PostgreSQL advisory lock (sendonce_lock_class, claimed_by) for as long as
--   it lives, so a sending intent whose owner's lock is gone was cut off by a
--   crash and is handed to another worker at once.
-- api_key_fingerprint: which API key the attempts were made with; the API
--   may scope idempotency keys per API key.
-- snoozes: rate-limit snoozes, counted here rather than read from River's
--   job metadata.
-- forced_retry_at: when an operator last retried the intent with force,
--   accepting that it may be delivered a second time.
ALTER TABLE sendonce_outbox
    ADD COLUMN uncertain           boolean NOT NULL DEFAULT false,
    ADD COLUMN claimed_by          integer,
    ADD COLUMN api_key_fingerprint text,
    ADD COLUMN snoozes             integer NOT NULL DEFAULT 0,
    ADD COLUMN forced_retry_at     timestamptz;

-- Worker instance ids, each the second half of an advisory lock key. A
-- sequence never hands out an id a live worker holds (it cycles only after
-- two billion starts).
CREATE SEQUENCE sendonce_worker_id_seq AS integer MINVALUE 1 CYCLE;

-- +goose Down
DROP SEQUENCE sendonce_worker_id_seq;
ALTER TABLE sendonce_outbox
    DROP COLUMN uncertain,
    DROP COLUMN claimed_by,
    DROP COLUMN api_key_fingerprint,
    DROP COLUMN snoozes,
    DROP COLUMN forced_retry_at;
