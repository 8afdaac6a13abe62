package main

// scheduleLong is `sendonce schedule --help`. It shows a schedule's SQL
// statement: the application's own plain-SQL producer (an INSERT INTO
// sendonce_outbox, as docs/sql-producers.md describes), an example for the
// user and no statement sendonce runs, so it stays here, in a file of its
// own, and not in internal/base/store.
const scheduleLong = `schedule manages recurring runs. Every occurrence of a schedule creates one
run, keyed by the schedule's name and the occurrence's time in UTC
(digest:2026-12-07T07:00:00Z), from a SQL statement (--sql-file) or a Go
producer registered with the workers (--producer). Running workers create
due occurrences, each once, whatever crashes and however many workers run.

--spec is five cron fields (minute hour day-of-month month day-of-week), or
six with seconds first, then optionally a time zone: "0 8 * * MON
Europe/Berlin"; descriptors like "@hourly" too. Without a zone, UTC.

The SQL statement runs in the occurrence's transaction with $1 = the run's
key and $2 = the occurrence's time; it inserts the members, for example:

  INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key)
  SELECT $1 || ':' || u.id, 'email',
         jsonb_build_object('from', 'news@example.com', 'to', jsonb_build_array(u.email),
                            'subject', 'Your weekly digest', 'text', u.digest),
         $1
  FROM users u WHERE u.wants_digest

--missed says what becomes of occurrences missed while no worker ran: late
(the latest of them is created once, when a worker is back) or skip (only
those less than a minute late are created).`
