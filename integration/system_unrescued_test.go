package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"
)

// The fault "pause-unrescued", once per seed: a worker stopped (SIGSTOP)
// with sends in flight, past its lease, comes back after its lease has
// ended to intents still claimed under that lease, because the rescue that
// would have handed them on failed. It must record nothing for them (rule
// 12): a worker whose lease has ended records nothing, whatever its claims
// say.
//
// The fault "pause" alone cannot show a record that ignores the lease. By
// the time the worker comes back the fleet's sweeper has ended its lease
// and handed its intents on in the same sweep, and a record checks the
// claim as well as the lease (sendstate's owned): a drained intent's rescue
// clears its claim (claimed_by), an intent with a River job of its own
// gets a new job, and the record finds neither its claim nor its job. So
// only the lease's check keeps the worker off intents whose rescue has not
// happened yet: between a lease's end and the rescue, or when the rescue's
// statement fails (a lock or statement timeout) and the next sweep's net
// (every ten sweeps) tries again. This fault makes that window:
//
//  1. The API holds every POST's answer for sysHoldAnswers, so that the
//     workers soon have sends in flight, until the victim is stopped.
//  2. The worker with the most intents and batches sending under its lease
//     is stopped, and the database refuses to hand on the intents claimed
//     under that lease (sys_fault.rescue_refused: a trigger fails the
//     rescue's update, and the worker's own release, of those rows).
//  3. Once a sweeper has ended its lease (its rescue failing), and
//     sysFenceMargin and a half second more, the worker is continued: its
//     sends end (their answers, or their replay window or lease cut them
//     off), and each outcome it would record comes later than rule 12's
//     margin after the lease's end.
//  4. sysUnrescuedHold later, the database hands the intents on again; the
//     next sweep's net rescues what is left, and the worker's releases
//     succeed.
//
// With the lease's check dropped from owned, so that a record checks only
// that the claim is the owner's (a lost lease not fenced), rule 12 reports
// the records the worker made under its ended lease (failed where the
// replay window cut a send off, sent where its answer came first) in seeds
// 1, 2 and 3: all four of the victim's sends in each, in two runs.
//
// The fault also found a retry that a worker stopped in the client's wait
// sent when continued, past its replay window, and so past the API's memory
// of the key (rule 1: delivered twice); the client now checks the
// deadline itself before each attempt (client's ctxDone).
type sysUnrescued struct {
	at    time.Time // when it starts
	phase string    // "", "hold", "stopped", "ended", "woken", "lift", "done"

	victim *sysWorker
	epoch  int32
	op     *sysOp
	hold   *sysEpisode // the API's hold on answers, until a victim is stopped
	// next is when the current phase gives up (hold, stopped) or moves on
	// (ended, woken).
	next time.Time
}

// sysHoldAnswers is how long the API holds each answer while the fault
// looks for its victim, one with sysUnrescuedSending intents and batches
// sending or more (any, when none has that many by the end of the hold);
// sysUnrescuedHold is how long after the victim is continued the database
// still refuses to hand its intents on.
//
// Each of the victim's sends is a record the fence must stop only when the
// send's own end (its answer, or its replay window, which ends while it is
// stopped) reaches it before the worker's watchdog does: a send cut off by
// the lease records nothing, knowing the lease lost. Both are due when it
// is continued, and which goes first is the Go scheduler's; several sends
// make it near certain that some outcome is recorded.
const (
	sysHoldAnswers      = 2 * time.Second
	sysUnrescuedSending = 4
	sysUnrescuedHold    = 1500 * time.Millisecond
)

// newUnrescued draws when the seed's fault starts, from a stream of its
// own (so that it shifts none of the schedule's draws): early enough that
// its 10 s or so end before the schedule does (15 s by default).
func newUnrescued(seed uint64, start time.Time, opsFor time.Duration) *sysUnrescued {
	rng := rand.New(rand.NewPCG(seed, 0x4e5c0ed))
	lead := min(opsFor/5, 3*time.Second)
	return &sysUnrescued{at: start.Add(lead + time.Duration(rng.IntN(1000))*time.Millisecond)}
}

// unrescuedActive says the fault holds a worker stopped or its intents
// unrescued, or looks for its victim: the faults pause and pg-restart
// wait (no lease ends within a restart's grace).
func (r *sysRunner) unrescuedActive() bool {
	u := r.unrescued
	return u != nil && u.phase != "" && u.phase != "done"
}

// unrescuedVictim says w is the worker the fault holds: the fault kill
// spares it.
func (r *sysRunner) unrescuedVictim(w *sysWorker) bool {
	return r.unrescuedActive() && r.unrescued.victim == w
}

// stepUnrescued moves the fault on, at each tick of the schedule.
func (r *sysRunner) stepUnrescued(now time.Time) {
	u := r.unrescued
	if u == nil || u.phase == "done" || now.Before(u.at) {
		return
	}
	switch u.phase {
	case "":
		n := 0
		for _, w := range r.workers {
			if !w.pausedUntil.IsZero() {
				return // the fault pause first
			}
			if w.p.running() {
				n++
			}
		}
		if n < 2 {
			return // another worker must be there to end the lease
		}
		u.phase, u.next = "hold", now.Add(sysHoldAnswers+2*time.Second)
		u.op = r.begin("fault-pause-unrescued", "")
		u.hold = &sysEpisode{name: "hold-answers", rules: []string{fmt.Sprintf("latency_after=%s;method=POST", sysHoldAnswers)}, until: u.next}
		r.episodes = append(r.episodes, u.hold)
		_ = r.applyFaults()
	case "hold":
		victim, epoch, keys := r.mostSending()
		if len(keys) < sysUnrescuedSending && now.Before(u.next) {
			return
		}
		if victim == nil {
			r.note(u.op, "no worker had a send in flight while the API held its answers")
			r.endUnrescued(outNo, nil)
			return
		}
		if err := r.refuseRescue(epoch); err != nil {
			r.endUnrescued(outNo, err)
			return
		}
		u.victim, u.epoch = victim, epoch
		if err := syscall.Kill(-victim.p.pid(), syscall.SIGSTOP); err != nil {
			r.endUnrescued(outNo, err)
			return
		}
		r.hooks.set(victim.hookAddr, false)
		// Its answers are held already: the hold ends, and with it the
		// wait of the schedule's own episodes.
		if i := slices.Index(r.episodes, u.hold); i >= 0 {
			r.episodes = slices.Delete(r.episodes, i, i+1)
			_ = r.applyFaults()
		}
		u.phase, u.next = "stopped", now.Add(20*time.Second)
		u.op.Detail = fmt.Sprintf("%s pid %d stopped with %d sending under epoch %d, whose rescue is refused: %v",
			victim.name, victim.p.pid(), len(keys), epoch, keys)
		u.op.Keys = keys
	case "stopped":
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var ended bool
		err := r.pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM sendonce_worker WHERE epoch = $1 AND ended_at IS NULL)`, u.epoch).Scan(&ended)
		cancel()
		switch {
		case err == nil && ended:
			u.phase, u.next = "ended", now.Add(sysFenceMargin+500*time.Millisecond)
			r.note(u.op, "its lease ended at "+now.Format("15:04:05.000"))
		case now.After(u.next):
			r.note(u.op, "its lease did not end in time")
			r.continueUnrescued()
			u.phase = "lift"
		}
	case "ended":
		if now.Before(u.next) {
			return
		}
		r.continueUnrescued()
		r.note(u.op, "continued at "+now.Format("15:04:05.000"))
		u.phase, u.next = "woken", now.Add(sysUnrescuedHold)
	case "woken":
		if !now.Before(u.next) {
			u.phase = "lift"
		}
	}
	if u.phase == "lift" {
		if err := r.refuseRescue(0); err == nil {
			r.endUnrescued(outYes, nil)
		}
	}
}

// continueUnrescued continues the victim (SIGCONT).
func (r *sysRunner) continueUnrescued() {
	w := r.unrescued.victim
	if w != nil && w.p.running() {
		_ = syscall.Kill(-w.p.pid(), syscall.SIGCONT)
		r.hooks.set(w.hookAddr, true)
	}
}

func (r *sysRunner) endUnrescued(o sysOutcome, err error) {
	r.unrescued.phase = "done"
	r.end(r.unrescued.op, o, err)
}

// refuseRescue makes the database refuse to hand on the intents claimed
// under the lease of epoch, or (0) no longer.
func (r *sysRunner) refuseRescue(epoch int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.pool.Exec(ctx, `UPDATE sys_fault SET rescue_refused = nullif($1::int4, 0) WHERE id = 1`, epoch)
	return err
}

// settleUnrescued, at quiescence, lets a fault that has stopped its victim
// run to its end (polling its phases, with a deadline), and drops one
// that has not.
func (r *sysRunner) settleUnrescued() {
	u := r.unrescued
	if u == nil || u.phase == "done" {
		return
	}
	if u.phase == "" {
		u.phase = "done"
		return
	}
	if u.phase == "hold" {
		r.note(u.op, "the schedule ended first")
		r.endUnrescued(outNo, nil)
		return
	}
	for end := time.Now().Add(time.Minute); r.unrescuedActive() && time.Now().Before(end); time.Sleep(40 * time.Millisecond) {
		r.stepUnrescued(time.Now())
	}
	if r.unrescuedActive() {
		r.t.Fatalf("system: seed=%d: the fault pause-unrescued did not end: %s", r.seed, u.op)
	}
}

// mostSending is the running worker with the most intents and batches
// sending under its held lease, its epoch and their keys; nil when there
// is none.
func (r *sysRunner) mostSending() (*sysWorker, int32, []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := r.pool.Query(ctx, `SELECT w.pid, w.epoch, array_agg(s.key ORDER BY s.key) FROM sendonce_worker w
		JOIN (SELECT claimed_by, idempotency_key AS key FROM sendonce_outbox WHERE state = 'sending' AND batch_key IS NULL
			UNION ALL
			SELECT claimed_by, idempotency_key FROM sendonce_batch WHERE state = 'sending') s ON s.claimed_by = w.epoch
		WHERE w.ended_at IS NULL AND w.lease_until > now()
		GROUP BY 1, 2 ORDER BY count(*) DESC, 1`)
	if err != nil {
		return nil, 0, nil
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var epoch int32
		var keys []string
		if rows.Scan(&pid, &epoch, &keys) != nil {
			return nil, 0, nil
		}
		for _, w := range r.workers {
			if w.p.running() && w.p.pid() == pid && w.pausedUntil.IsZero() {
				return w, epoch, keys
			}
		}
	}
	return nil, 0, nil
}
