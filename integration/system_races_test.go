package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/outbox"
)

// The system test's targeted operations: each steers an operation to the
// instant a past hole needed, by polling the database for the moment
// (bounded, a few milliseconds apart), so the general rules catch the
// hole should it come back.
//
//   - suppress-frozen (hole 4): a recipient of a coalesced batch's member
//     suppressed right after the batch is frozen, before its first claim
//     where the poll is quick enough; the claim must look it up (rule 3).
//   - cancel-at-freeze (hole 5): a run canceled around the instant the
//     coalescer freezes a batch of its members (or just after it); none of
//     the members may go out unless attempted before the cancel (rule 3).
//   - a plain-SQL member inserted into a run just canceled (hole 6): it
//     must be refused (rule 3: a canceled run takes no new member).

// pollEvery is the targeted operations' polling interval.
const pollEvery = 5 * time.Millisecond

// coalescing reports whether a worker gathers email intents into batches.
func (r *sysRunner) coalescing() bool {
	for _, w := range r.workers {
		if w.coalesce {
			return true
		}
	}
	return false
}

// emailSpecs makes n new email intents.
func (r *sysRunner) emailSpecs(n int) ([]*sysSpec, []int) {
	var specs []*sysSpec
	var variants []int
	for range n {
		specs = append(specs, r.newSpec(outbox.KindEmail))
		variants = append(variants, 1)
	}
	return specs, variants
}

// opSuppressFrozen enqueues a few emails for the coalescing workers, polls
// sendonce_batch until one of them is in a frozen batch, and suppresses a
// recipient of one of its members at once, before the batch's first claim
// where it can.
func (r *sysRunner) opSuppressFrozen() {
	if !r.coalescing() {
		return
	}
	specs, variants := r.emailSpecs(4 + r.rng.IntN(4))
	r.opEnqueueGo(specs, variants, "enqueue-go")
	var keys []string
	for _, s := range specs {
		if r.m.intents[s.Key].Committed == outYes {
			keys = append(keys, s.Key)
		}
	}
	if len(keys) < 2 {
		return
	}
	var batch string
	var members []string
	var claimed *time.Time
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(pollEvery) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.pool.QueryRow(ctx, `SELECT idempotency_key, member_keys, first_attempt_at FROM sendonce_batch
			WHERE member_keys && $1::text[] ORDER BY id LIMIT 1`, keys).Scan(&batch, &members, &claimed)
		cancel()
		if err == nil || !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if batch == "" {
		// Sent alone (by a worker that does not coalesce), or not yet
		// taken by a job: nothing to aim at.
		op := r.begin("suppress-frozen", fmt.Sprintf("no batch of %v frozen within 3 s", keys))
		r.end(op, outNo, nil)
		return
	}
	var member string
	for _, k := range members {
		if r.specs[k] != nil && r.m.intents[k].Committed == outYes {
			member = k
			break
		}
	}
	if member == "" {
		return
	}
	addrs := r.specs[member].addrs()
	name, _, _ := strings.Cut(addrs[r.rng.IntN(len(addrs))], "@")
	op := r.suppressForm("suppress-frozen", sysForm(r.rng, name), true, false)
	op.Keys = []string{member, batch}
	before := "already claimed at " + fmtTime(claimed)
	if claimed == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.pool.QueryRow(ctx, `SELECT first_attempt_at FROM sendonce_batch WHERE idempotency_key = $1`, batch).Scan(&claimed)
		cancel()
		before = "first claimed at " + fmtTime(claimed)
	}
	r.note(op, fmt.Sprintf("a recipient of %s, frozen in %s with %v; the batch %s", member, batch, members, before))
}

// opCancelAtFreeze enqueues a run of emails for the coalescing workers and
// cancels it around the instant a batch of it is frozen: as soon as another
// session is seen in the middle of a freeze (pg_stat_activity: its last
// statement is the freeze's read of the members or its insert of the
// batch; should that text change, the next two triggers remain), a batch
// of the run is seen frozen, or a drawn while after the first member's job
// starts to gather (the coalescer freezes a batch 200 ms after its first
// arrival), whichever comes first. Then it inserts a plain-SQL member into
// the run just canceled. With hole 5 put back (Freeze not locking the
// run), seed 4 catches it (rule 3: members delivered after a cancel that
// counted canceled=0).
func (r *sysRunner) opCancelAtFreeze() {
	if !r.coalescing() {
		return
	}
	r.nRuns++
	key := fmt.Sprintf("sysrun:%d:%02d", r.seed, r.nRuns)
	r.m.runs = append(r.m.runs, key)
	r.runKeys = append(r.runKeys, key)
	// Many members: the coalescing worker gets several of them, and the
	// freeze's transaction, which the cancel must meet, is longer.
	specs, _ := r.emailSpecs(6 + r.rng.IntN(7))
	tenant := r.runTenantToGive(key)
	r.drawMemberTenants(key, specs, tenant)
	if r.runEnqueue(key, tenant, specs, time.Time{}) != outYes {
		return
	}
	after := time.Duration(170+r.rng.IntN(80)) * time.Millisecond
	var gathering time.Time
	saw := "nothing"
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(pollEvery) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		// running: members being gathered, each by its River job (one of
		// its own, as an upgraded database's) or claimed by a drain and
		// not yet bound to a batch.
		var running, freezing int
		var frozen string
		// freezing: a transaction of another session is in the middle of a
		// freeze (its last statement read members for a batch, or wrote
		// one); a cancel now meets it, as hole 5 needed.
		err := r.pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM river_job WHERE state = 'running' AND args->>'run' = $1)
					+ (SELECT count(*) FROM sendonce_outbox WHERE run_key = $1 AND job_id IS NULL AND state = 'sending' AND batch_key IS NULL),
				(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
					AND xact_start IS NOT NULL AND state IN ('active', 'idle in transaction')
					AND (query LIKE '%o.batch_key IS NULL%' OR query LIKE '%INSERT INTO sendonce_batch%')),
				coalesce((SELECT string_agg(idempotency_key, ',') FROM sendonce_batch WHERE run_key = $1), '')`, key).Scan(&running, &freezing, &frozen)
		cancel()
		if err != nil {
			break
		}
		if frozen != "" {
			saw = "batch " + frozen + " frozen"
			break
		}
		if running > 0 && freezing > 0 {
			saw = fmt.Sprintf("%d members gathering, a freeze in progress", running)
			break
		}
		if running > 0 && gathering.IsZero() {
			gathering = time.Now()
		}
		if !gathering.IsZero() && time.Since(gathering) >= after {
			saw = fmt.Sprintf("%d members gathering for %s", running, after)
			break
		}
	}
	op := r.runOp(key, "cancel", " at freeze: "+saw)
	if op.Result == outYes.String() {
		s := []*sysSpec{r.newSpec(outbox.KindEmail)}
		r.drawMemberTenants(key, s, "")
		r.opEnqueueSQL(s, []int{1}, key)
	}
}
