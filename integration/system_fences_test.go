package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
)

// The system test's rules on what the ledger cannot show (issue 44: each
// was written for a mutation of the drain that the ledger's rules missed):
// a request only under a committed claim (10), a quota's count that
// follows the requests (11), no claim or record under an ended lease (12).
//
// Rule 10: no request of an intent is made without a committed claim.
// The fake's idempotency key replays a second send of a key within its
// window, so a send whose claim never committed (handed out before the
// commit, which then failed) delivers nothing twice and the ledger cannot
// see it. The system test therefore logs every claim (an update that
// counts one attempt more) from a trigger, in the claim's own transaction:
// a claim rolled back leaves no line. Each request of an intent under its
// own key must then be paid for by a claim logged before it arrived, or be
// a retry, within one attempt, of the request just before it, answered
// with a status the client retries (a lost answer, 408, 429, 5xx). So the
// rule also sees two attempts of one key at once (a claim taken from under
// a send in flight, as a rescue of a claim whose lease is held would): the
// old attempt's retry comes after the new attempt's request.
//
// The fault "claim-commit-fail" makes the commit of a drain's claims fail
// (a deferred trigger raises at commit, with a probability set in
// sys_fault): the statement returns its rows, then its commit is refused,
// as a commit cut off by a crash or a failover is. A drain must send none
// of them.

// sysClaimSQL installs the logs of rules 10 and 12 (claims, records, the
// ends of leases), the commit fault and the rescue fault of
// pause-unrescued (system_unrescued_test.go) in a seed's database, after
// its migrations.
const sysClaimSQL = `
CREATE TABLE sys_claim_log (id bigserial PRIMARY KEY, key text NOT NULL, attempts int NOT NULL, owner int4, at timestamptz NOT NULL,
	stmt timestamptz NOT NULL, tx timestamptz NOT NULL, job_id bigint, batch_key text);
CREATE TABLE sys_record_log (id bigserial PRIMARY KEY, key text NOT NULL, state text NOT NULL, owner int4 NOT NULL, stmt timestamptz NOT NULL);
CREATE TABLE sys_lease_end (epoch int4 NOT NULL, at timestamptz NOT NULL);
CREATE TABLE sys_fault (id int PRIMARY KEY, claim_commit_fail float8 NOT NULL, rescue_refused int4);
INSERT INTO sys_fault VALUES (1, 0, NULL);
CREATE FUNCTION sys_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO sys_claim_log (key, attempts, owner, at, stmt, tx, job_id, batch_key)
		VALUES (NEW.idempotency_key, NEW.attempts, NEW.claimed_by, clock_timestamp(), statement_timestamp(), now(), NEW.job_id, NEW.batch_key);
	RETURN NULL;
END $$;
CREATE TRIGGER sys_log_claim AFTER UPDATE ON sendonce_outbox FOR EACH ROW
	WHEN (NEW.attempts > OLD.attempts) EXECUTE FUNCTION sys_log_claim();
CREATE FUNCTION sys_log_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO sys_record_log (key, state, owner, stmt) VALUES (NEW.idempotency_key, NEW.state, OLD.claimed_by, statement_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER sys_log_record AFTER UPDATE ON sendonce_outbox FOR EACH ROW
	WHEN (OLD.state = 'sending' AND OLD.claimed_by IS NOT NULL AND OLD.claimed_by <> 0
		AND (NEW.state IN ('sent', 'failed', 'suppressed') OR (NEW.state = 'pending' AND NEW.claimed_by IS NOT DISTINCT FROM OLD.claimed_by)))
	EXECUTE FUNCTION sys_log_record();
CREATE FUNCTION sys_log_lease_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO sys_lease_end (epoch, at) VALUES (OLD.epoch, clock_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER sys_log_lease_end AFTER UPDATE ON sendonce_worker FOR EACH ROW
	WHEN (OLD.ended_at IS NULL AND (NEW.ended_at IS NOT NULL OR NEW.epoch <> OLD.epoch)) EXECUTE FUNCTION sys_log_lease_end();
CREATE FUNCTION sys_fail_claim_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF random() < (SELECT claim_commit_fail FROM sys_fault WHERE id = 1) THEN
		RAISE EXCEPTION 'sys: injected failure of the commit of a claim of %', NEW.idempotency_key;
	END IF;
	RETURN NULL;
END $$;
CREATE FUNCTION sys_refuse_rescue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.claimed_by = (SELECT rescue_refused FROM sys_fault WHERE id = 1) THEN
		RAISE EXCEPTION 'sys: injected failure of the hand-on of %, claimed under the lease of epoch %', OLD.idempotency_key, OLD.claimed_by;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER sys_refuse_rescue BEFORE UPDATE ON sendonce_outbox FOR EACH ROW
	WHEN (OLD.state = 'sending' AND OLD.claimed_by IS NOT NULL AND NEW.state IN ('pending', 'sending')
		AND (NEW.claimed_by IS NULL OR NEW.job_id IS DISTINCT FROM OLD.job_id))
	EXECUTE FUNCTION sys_refuse_rescue();
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
	if want > 0 && r.dbFaultOn.IsZero() {
		r.dbFaultOn = time.Now() // it may be on from now (rule 16)
	}
	if _, err := r.pool.Exec(ctx, `UPDATE sys_fault SET claim_commit_fail = $1 WHERE id = 1`, want); err == nil {
		r.dbFault = want
		if want == 0 && !r.dbFaultOn.IsZero() {
			r.faultSpan(r.dbFaultOn, time.Now())
			r.dbFaultOn = time.Time{}
		}
	}
}

// sysClaim is one committed claim of the claim log: the key, its attempts
// after the claim, the owner's lease epoch, the start of the claim's
// transaction (Tx: its now(), by which a tenant's rate refills), of its
// statement (Stmt) and the instant its trigger ran, at the statement's
// end (At), and the row's job and batch then (a drain's claim has
// neither; a batch's members have both; an intent with a River job of its
// own, its job).
type sysClaim struct {
	Key          string
	Attempts     int
	Owner        int32
	Tx, Stmt, At time.Time
	JobID        *int64
	BatchKey     *string
}

func (c sysClaim) String() string {
	where := ""
	if c.BatchKey != nil {
		where = " in batch " + *c.BatchKey
	} else if c.JobID != nil {
		where = fmt.Sprintf(" by job %d", *c.JobID)
	}
	return fmt.Sprintf("%s claimed (attempts=%d) under epoch %d, transaction %s, statement %s..%s%s", c.Key, c.Attempts, c.Owner,
		c.Tx.Format("15:04:05.000"), c.Stmt.Format("15:04:05.000"), c.At.Format("15:04:05.000"), where)
}

// readClaims reads the claim log in the order of the claims: the whole of
// it, and each key's committed claims' times (rule 10).
func readClaims(ctx context.Context, pool *pgxpool.Pool) ([]sysClaim, map[string][]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT key, attempts, coalesce(owner, 0), tx, stmt, at, job_id, batch_key FROM sys_claim_log ORDER BY id`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var log []sysClaim
	out := map[string][]time.Time{}
	for rows.Next() {
		var c sysClaim
		if err := rows.Scan(&c.Key, &c.Attempts, &c.Owner, &c.Tx, &c.Stmt, &c.At, &c.JobID, &c.BatchKey); err != nil {
			return nil, nil, err
		}
		log = append(log, c)
		out[c.Key] = append(out[c.Key], c.At)
	}
	return log, out, rows.Err()
}

// retriedByClient says whether the client makes another request of the
// same attempt after this answer: a lost answer (timeouts included), 408,
// 429 (with Retry-After; the budget's own 429 retry too) or a 5xx.
func retriedByClient(r fakeapi.RequestRecord) bool {
	return r.Dropped || r.Status == 0 || r.Status == 499 || r.Status == 408 || r.Status == 429 || r.Status >= 500
}

// postsByKey is the POST requests under each intent's own key (not the
// batches' keys, nor whatever is no intent's own key), in the order they
// came.
func (m *model) postsByKey(f sysFinal) map[string][]fakeapi.RequestRecord {
	byKey := map[string][]fakeapi.RequestRecord{}
	for _, r := range f.requests {
		if r.Method != "POST" || m.intents[r.IdempotencyKey] == nil {
			continue
		}
		byKey[r.IdempotencyKey] = append(byKey[r.IdempotencyKey], r)
	}
	for _, reqs := range byKey {
		sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].ReceivedAt.Before(reqs[j].ReceivedAt) })
	}
	return byKey
}

// checkClaims is rule 10.
func (m *model) checkClaims(f sysFinal) {
	byKey := m.postsByKey(f)
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		reqs := byKey[key]
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
				m.violate("10", []string{key}, nil, "%s: request %s at %s was made with no committed claim to pay for it, nor as a retry of the request before it "+
					"(a send whose claim did not commit, or two attempts at once; committed claims at [%s]; requests [%s])",
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
// schedule ended (its slots' tokens and its last lease's), and by a lease
// whose commit's answer a PostgreSQL restart cut off: the slack.
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
	_, faults := r.m.opCounts()
	for _, w := range r.workers {
		procs += len(w.all)
		slack += len(w.all)*(w.conc+50) + faults["pg-restart"]*50
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

// Rule 12: nothing is claimed or recorded under a lease that has ended.
// A claim checks in its statement that its owner's lease is held, and so
// does a record (MarkSent, a park, a failure): a worker whose lease lapsed
// (it was paused past it: the fault "pause", SIGSTOP then SIGCONT) must
// not take an intent another worker may send, nor write over an intent
// handed on. The claim log above holds each claim's owner, a second log
// each record's (a row leaving sending for sent, failed or suppressed, or
// for pending with its claim kept: a retry or a snooze), a third when each
// lease ended (sendonce_worker's ended_at set, or its epoch replaced); a
// claim or record whose statement began more than sysFenceMargin after its
// owner's lease ended was made under a lease its statement saw ended. The
// margin covers the commit of the lease's end after its trigger ran.
//
// A record under an ended lease that still names the row's claim is seen
// only when the rescue has not handed the row on: the fault
// "pause-unrescued" (system_unrescued_test.go) makes it so, and with the
// lease's check dropped from a record's condition (a lost lease not
// fenced) this rule reports it in seeds 1, 2 and 3.
//
// The fence that stops a send when its lease ends (bindLease) is not held
// here: what it stops is a request under the intent's key, which the API
// replays, and in this test each send is bounded by its replay window
// (sysReplayWindow, 5 s), which ends within seconds of its lease (3 s).
const sysFenceMargin = 2 * time.Second

// sysFenced is a claim or record made under a lease that had ended.
type sysFenced struct {
	What, Key   string
	Owner       int32
	Stmt, Ended time.Time
}

func readFenced(ctx context.Context, pool *pgxpool.Pool) ([]sysFenced, error) {
	rows, err := pool.Query(ctx, `SELECT 'claim', c.key, c.owner, c.stmt, e.at FROM sys_claim_log c JOIN sys_lease_end e ON e.epoch = c.owner
			WHERE c.stmt > e.at + $1::float8 * interval '1 second'
		UNION ALL
		SELECT 'record (' || r.state || ')', r.key, r.owner, r.stmt, e.at FROM sys_record_log r JOIN sys_lease_end e ON e.epoch = r.owner
			WHERE r.stmt > e.at + $1::float8 * interval '1 second'
		ORDER BY 4`, sysFenceMargin.Seconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sysFenced
	for rows.Next() {
		var f sysFenced
		if err := rows.Scan(&f.What, &f.Key, &f.Owner, &f.Stmt, &f.Ended); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// checkFenced is rule 12.
func (m *model) checkFenced(f sysFinal) {
	for _, x := range f.fenced {
		m.violate("12", []string{x.Key}, nil, "%s: %s under the lease of epoch %d at %s, %s after that lease ended (%s)",
			x.Key, x.What, x.Owner, x.Stmt.Format("15:04:05.000"), x.Stmt.Sub(x.Ended).Round(time.Millisecond), x.Ended.Format("15:04:05.000"))
	}
}

// opPause stops a running worker (SIGSTOP to its process group, as a long
// GC pause or a frozen VM would) for longer than its lease, while another
// runs: the fleet's sweeper ends its lease and hands its intents on.
// continuePaused continues it (SIGCONT) when its time is up.
func (r *sysRunner) opPause() {
	if r.unrescuedActive() {
		return
	}
	var live []*sysWorker
	for _, w := range r.workers {
		if !w.pausedUntil.IsZero() {
			return // one at a time
		}
		if w.p.running() {
			live = append(live, w)
		}
	}
	if len(live) < 2 {
		return
	}
	w := live[r.rng.IntN(len(live))]
	d := time.Duration(6000+r.rng.IntN(2500)) * time.Millisecond
	op := r.begin("fault-pause", fmt.Sprintf("%s pid %d, for %s", w.name, w.p.pid(), d))
	r.hooks.set(w.hookAddr, false)
	err := syscall.Kill(-w.p.pid(), syscall.SIGSTOP)
	if err == nil {
		w.pausedUntil = time.Now().Add(d)
	}
	r.end(op, goOutcome(err), err)
}

// continuePaused continues the paused workers whose time is up (all of
// them with force).
func (r *sysRunner) continuePaused(force bool) {
	for _, w := range r.workers {
		if w.pausedUntil.IsZero() || (!force && time.Now().Before(w.pausedUntil)) {
			continue
		}
		w.pausedUntil = time.Time{}
		if w.p.running() {
			_ = syscall.Kill(-w.p.pid(), syscall.SIGCONT)
			r.hooks.set(w.hookAddr, true)
		}
	}
}
