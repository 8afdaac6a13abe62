package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
)

// Rule 10: no request of an intent is made without a committed claim.
// The fake's idempotency key replays a second send of a key within its
// window, so a send whose claim never committed (handed out before the
// commit, which then failed) delivers nothing twice and the ledger cannot
// see it. The system test therefore logs every claim (an update that
// counts one attempt more) from a trigger, in the claim's own transaction:
// a claim rolled back leaves no line. Each request of an intent under its
// own key must then be paid for by a claim logged before it arrived, or be
// a retry, within one attempt, of a request answered with a status the
// client retries (a lost answer, 408, 429, 5xx).
//
// The fault "claim-commit-fail" makes the commit of a drain's claims fail
// (a deferred trigger raises at commit, with a probability set in
// sys_fault): the statement returns its rows, then its commit is refused,
// as a commit cut off by a crash or a failover is. A drain must send none
// of them.

// sysClaimSQL installs the claim log and the commit fault in a seed's
// database (after its migrations).
const sysClaimSQL = `
CREATE TABLE sys_claim_log (id bigserial PRIMARY KEY, key text NOT NULL, attempts int NOT NULL, owner int4, at timestamptz NOT NULL);
CREATE TABLE sys_fault (id int PRIMARY KEY, claim_commit_fail float8 NOT NULL);
INSERT INTO sys_fault VALUES (1, 0);
CREATE FUNCTION sys_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO sys_claim_log (key, attempts, owner, at) VALUES (NEW.idempotency_key, NEW.attempts, NEW.claimed_by, clock_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER sys_log_claim AFTER UPDATE ON sendonce_outbox FOR EACH ROW
	WHEN (NEW.attempts > OLD.attempts) EXECUTE FUNCTION sys_log_claim();
CREATE FUNCTION sys_fail_claim_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF random() < (SELECT claim_commit_fail FROM sys_fault WHERE id = 1) THEN
		RAISE EXCEPTION 'sys: injected failure of the commit of a claim of %', NEW.idempotency_key;
	END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER sys_fail_claim_commit AFTER UPDATE ON sendonce_outbox DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
	WHEN (NEW.attempts > OLD.attempts AND NEW.job_id IS NULL AND NEW.batch_key IS NULL) EXECUTE FUNCTION sys_fail_claim_commit();
`

func installClaimLog(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, sysClaimSQL); err != nil {
		t.Fatalf("install the claim log: %v", err)
	}
}

// syncDBFault sets sys_fault to what the active episodes want, once the
// database answers (it may be restarting): called at every tick.
func (r *sysRunner) syncDBFault() {
	want := 0.0
	for _, ep := range r.episodes {
		want = max(want, ep.claimCommitFail)
	}
	if want == r.dbFault {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := r.pool.Exec(ctx, `UPDATE sys_fault SET claim_commit_fail = $1 WHERE id = 1`, want); err == nil {
		r.dbFault = want
	}
}

// readClaims reads the claim log: each key's committed claims' times.
func readClaims(ctx context.Context, pool *pgxpool.Pool) (map[string][]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT key, at FROM sys_claim_log ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]time.Time{}
	for rows.Next() {
		var key string
		var at time.Time
		if err := rows.Scan(&key, &at); err != nil {
			return nil, err
		}
		out[key] = append(out[key], at)
	}
	return out, rows.Err()
}

// retriedByClient says whether the client makes another request of the
// same attempt after this answer: a lost answer (timeouts included), 408,
// 429 (with Retry-After; the budget's own 429 retry too) or a 5xx.
func retriedByClient(r fakeapi.RequestRecord) bool {
	return r.Dropped || r.Status == 0 || r.Status == 499 || r.Status == 408 || r.Status == 429 || r.Status >= 500
}

// checkClaims is rule 10.
func (m *model) checkClaims(f sysFinal) {
	byKey := map[string][]fakeapi.RequestRecord{}
	for _, r := range f.requests {
		if r.Method != "POST" || m.intents[r.IdempotencyKey] == nil {
			continue // batches' keys, and whatever is no intent's own key
		}
		byKey[r.IdempotencyKey] = append(byKey[r.IdempotencyKey], r)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		reqs := byKey[key]
		sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].ReceivedAt.Before(reqs[j].ReceivedAt) })
		claims := slices.Clone(f.claims[key])
		slices.SortFunc(claims, func(a, b time.Time) int { return a.Compare(b) })
		credit, ci := 0, 0
		var prev *fakeapi.RequestRecord
		for i := range reqs {
			r := &reqs[i]
			for ci < len(claims) && !claims[ci].After(r.ReceivedAt) {
				credit++
				ci++
			}
			switch {
			case credit > 0:
				credit--
			case prev != nil && retriedByClient(*prev):
				// Another request of the attempt prev was of.
			default:
				var cl []string
				for _, c := range claims {
					cl = append(cl, c.Format("15:04:05.000000"))
				}
				var rq []string
				for _, q := range reqs {
					rq = append(rq, fmt.Sprintf("%s at %s status %d", q.RequestID, q.ReceivedAt.Format("15:04:05.000000"), q.Status))
				}
				m.violate("10", []string{key}, nil, "%s: request %s at %s was made with no committed claim to pay for it (committed claims at [%s]; requests [%s])",
					key, r.RequestID, r.ReceivedAt.Format("15:04:05.000000"), strings.Join(cl, " "), strings.Join(rq, "; "))
			}
			prev = r
		}
	}
}

// Rule 11: the fleet's count of a quota follows the requests the API
// received. Every token of the budget a send takes counts against the
// quota; one taken for a send that made no request (the claim found
// nothing, the intent was parked before its call) goes back (Return) and
// off the count again, or is spent by the next send. A token that does not
// go back counts a request that was never made, and the fleet would stop
// for a quota it has not used. The count may run ahead of the requests by
// what a worker process held unspent when it was killed or when the
// schedule ended (its slots' tokens and its last lease's): the slack.
//
// sysQuota is the daily quota the workers count in the seeds that draw
// it: no rate (the fleet finds it, as without --api-rate), and a count
// far above what a seed sends, so it never binds.
const sysQuota = "1000000/d"

func (r *sysRunner) checkQuota(f sysFinal) {
	if !f.quotaSameDay {
		r.t.Logf("system: seed=%d: the quota's day changed during the seed; rule 11 not checked", r.seed)
		return
	}
	posts := 0
	for _, q := range f.requests {
		if q.Method == "POST" {
			posts++
		}
	}
	slack, procs := 0, 0
	for _, w := range r.workers {
		procs += len(w.all)
		slack += len(w.all) * (w.conc + 50)
	}
	r.t.Logf("system: seed=%d quota: counted %d, POST requests %d, slack %d (%d worker processes)", r.seed, f.quotaUsed, posts, slack, procs)
	switch {
	case f.quotaUsed < 0:
		r.m.violate("11", nil, nil, "the workers count a daily quota (%s), but sendonce_rate_quota has no count of it", sysQuota)
	case f.quotaUsed > int64(posts+slack):
		r.m.violate("11", nil, nil, "the fleet counted %d requests against its daily quota, but the API received %d POST requests: %d more than the %d "+
			"tokens %d worker processes may have held unspent (tokens taken for no request were not given back)",
			f.quotaUsed, posts, f.quotaUsed-int64(posts), slack, procs)
	}
}
