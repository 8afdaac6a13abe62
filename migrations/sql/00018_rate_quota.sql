-- +goose Up
-- Quotas (issue 23): limits per calendar day or month (--api-rate 50000/d,
-- 1000000/mo), counted for the whole fleet of one API key, never turned
-- into a rate. A row per API key fingerprint and period.
--
-- period:          'd' (a calendar day) or 'mo' (a calendar month), in the
--                  workers' quota zone (UTC unless configured).
-- quota:           the count configured on the worker that leased last;
--                  NULL when the row was made by the API's answer alone (a
--                  429 saying the quota is exhausted) and no worker
--                  configured one.
-- period_start,
-- resets_at:       the period counted: used is reset at resets_at.
-- used:            requests the fleet took tokens for in the period, less
--                  those it gave back unspent or the API refused with a
--                  rate-limit 429.
-- exhausted_until: the quota is used up (by the count, or by the API's
--                  429): the fleet sends nothing but one probe a minute
--                  until then, the reset.
-- exhausted_by:    'count' or 'api', for `sendonce status`.
-- probe_at:        while exhausted, when the next probe may go.
-- count_off_until: a probe the API served while the count said exhausted:
--                  the API allows more than counted (the quota was raised,
--                  or its period differs), so until the reset only the
--                  API's 429 stops the fleet.
CREATE TABLE sendonce_rate_quota (
    key_fingerprint text NOT NULL,
    period          text NOT NULL,
    quota           bigint,
    period_start    timestamptz NOT NULL,
    resets_at       timestamptz NOT NULL,
    used            bigint NOT NULL DEFAULT 0,
    exhausted_until timestamptz NOT NULL DEFAULT 'epoch',
    exhausted_by    text NOT NULL DEFAULT '',
    probe_at        timestamptz NOT NULL DEFAULT 'epoch',
    count_off_until timestamptz NOT NULL DEFAULT 'epoch',
    PRIMARY KEY (key_fingerprint, period),
    CONSTRAINT sendonce_rate_quota_period_check CHECK (period IN ('d', 'mo')),
    CONSTRAINT sendonce_rate_quota_quota_check CHECK (quota IS NULL OR quota > 0),
    CONSTRAINT sendonce_rate_quota_used_check CHECK (used >= 0)
);

-- +goose Down
DROP TABLE sendonce_rate_quota;
