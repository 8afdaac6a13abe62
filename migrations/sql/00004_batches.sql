-- +goose Up
-- Coalesced sends: single email intents sent together in one request to
-- POST /emails/batch under a key of the batch's own. A batch is frozen
-- before its first attempt: its key, its request body (byte for byte) and
-- its members, in order, never change after the row is written, so every
-- attempt, on any worker, after any crash, sends the same request under the
-- same key and the API replays it instead of delivering twice.
--
-- state:     pending (frozen, not yet attempted or to be tried again),
--            sending, sent (the API answered; each member has its own
--            outcome), failed (given up; the members are failed too), split
--            (refused whole before the API accepted anything; its members
--            went on in smaller batches or alone).
-- job_id:    the River job (kind sendonce_batch) that may send it.
-- uncertain, claimed_by, api_key_fingerprint, first_attempt_at: as on
--            sendonce_outbox, for the batch's request.
CREATE TABLE sendonce_batch (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key     text        NOT NULL,
    queue               text        NOT NULL,
    body                text        NOT NULL,
    member_keys         text[]      NOT NULL,
    state               text        NOT NULL DEFAULT 'pending',
    attempts            integer     NOT NULL DEFAULT 0,
    job_id              bigint,
    first_attempt_at    timestamptz,
    uncertain           boolean     NOT NULL DEFAULT false,
    claimed_by          integer,
    api_key_fingerprint text,
    last_error          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sendonce_batch_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT sendonce_batch_state_check
        CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'split')),
    CONSTRAINT sendonce_batch_members_check
        CHECK (cardinality(member_keys) BETWEEN 1 AND 100)
);

-- The sweeper's rescue and reconcile look at unsettled batches only.
CREATE INDEX sendonce_batch_unsettled_idx ON sendonce_batch (id)
    WHERE state IN ('pending', 'sending');

-- The batch an intent is bound to (its key). Set when the batch is frozen
-- and kept after it was sent, so `sendonce show` can say which request
-- carried the intent.
ALTER TABLE sendonce_outbox ADD COLUMN batch_key text;

-- +goose Down
ALTER TABLE sendonce_outbox DROP COLUMN batch_key;
DROP TABLE sendonce_batch;
