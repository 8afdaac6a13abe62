package integration

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// The system test's faults: worker SIGKILLs (and restarts), PostgreSQL
// restarts (immediate stop, then start), and episodes of the fake's fault
// rules: lost answers after delivery, 5xx, 429 bursts with and without
// Retry-After, and a 400/422 on the retry of an uncertain attempt.

// sysEpisode is a set of fault rules active until a time, possibly followed
// by another phase (an uncertain attempt, then a refusal of its retry).
type sysEpisode struct {
	name  string
	rules []string
	until time.Time
	next  *sysEpisode
	hold  time.Duration // the next phase's length
	// claimCommitFail is the probability that the commit of a drain's
	// claim fails while the episode lasts (sys_fault, system_claims_test.go).
	claimCommitFail float64
}

// opFaultEpisode starts a drawn episode of fault rules.
func (r *sysRunner) opFaultEpisode() {
	d := time.Duration(800+r.rng.IntN(2200)) * time.Millisecond
	var ep *sysEpisode
	switch x := r.rng.IntN(13); x {
	case 0:
		ep = &sysEpisode{name: "lost-answer", rules: []string{"drop_after;method=POST;p=0.3"}}
	case 1:
		ep = &sysEpisode{name: "lost-answer", rules: []string{"error_after=503;method=POST;p=0.3"}}
	case 2:
		ep = &sysEpisode{name: "slow-answer", rules: []string{"latency_after=700ms;method=POST;p=0.4"}}
	case 3:
		ep = &sysEpisode{name: "5xx", rules: []string{"error_before=503;method=POST;p=0.3"}}
	case 4:
		ep = &sysEpisode{name: "429", rules: []string{"rate_limit;method=POST;p=0.4"}}
	case 5:
		ep = &sysEpisode{name: "429-retry-after", rules: []string{"retry_after=1;method=POST;p=0.4"}}
	case 9, 10:
		ep = bouncesEpisode()
	case 11, 12:
		ep = &sysEpisode{name: "claim-commit-fail", claimCommitFail: 0.5}
	case 6, 7:
		// Hole 2's shape: a batch request delivered with its answer lost,
		// then its retry refused whole with 400/422.
		status := []string{"400", "422"}[r.rng.IntN(2)]
		ep = &sysEpisode{name: "batch-uncertain-then-" + status, rules: []string{"drop_after;key=sendonce-batch:"},
			next: &sysEpisode{name: "refuse-" + status, rules: []string{"error_before=" + status + ";key=sendonce-batch:"}},
			hold: time.Duration(1500+r.rng.IntN(1500)) * time.Millisecond}
	default:
		status := []string{"400", "422"}[r.rng.IntN(2)]
		ep = &sysEpisode{name: "uncertain-then-" + status, rules: []string{"drop_after;method=POST;key=sys:;p=0.5"},
			next: &sysEpisode{name: "refuse-" + status, rules: []string{"error_before=" + status + ";method=POST;key=sys:;p=0.5"}},
			hold: time.Duration(1500+r.rng.IntN(1500)) * time.Millisecond}
	}
	ep.until = time.Now().Add(d)
	op := r.begin("fault-"+ep.name, strings.Join(ep.rules, " ")+fmt.Sprintf(" for %s", d.Round(time.Millisecond)))
	r.episodes = append(r.episodes, ep)
	err := r.applyFaults()
	r.end(op, goOutcome(err), err)
}

// applyFaults gives the fake the rules of the active episodes, and of
// the race (its latency on the racing runs' sends).
func (r *sysRunner) applyFaults() error {
	var rules []string
	for _, ep := range r.episodes {
		rules = append(rules, ep.rules...)
	}
	if race := r.m.ten.race; race != nil {
		rules = append(rules, race.rules...)
	}
	var faults []fakeapi.Fault
	for _, rule := range rules {
		f, err := fakeapi.ParseFault(rule)
		if err != nil {
			r.t.Fatalf("fault rule %q: %v", rule, err)
		}
		faults = append(faults, f)
	}
	return r.srv.SetFaults(faults...)
}

// expireFaults ends the episodes whose time is up, starting their next
// phase.
func (r *sysRunner) expireFaults(now time.Time) {
	changed := false
	var keep []*sysEpisode
	for _, ep := range r.episodes {
		if now.Before(ep.until) {
			keep = append(keep, ep)
			continue
		}
		changed = true
		if ep.next != nil {
			ep.next.until = now.Add(ep.hold)
			keep = append(keep, ep.next)
			op := r.begin("fault-"+ep.next.name, strings.Join(ep.next.rules, " ")+fmt.Sprintf(" for %s", ep.hold.Round(time.Millisecond)))
			r.end(op, outYes, nil)
		}
	}
	r.episodes = keep
	if changed {
		_ = r.applyFaults()
	}
}

// opKill SIGKILLs a running worker; it is started again after a drawn
// while (restartDead).
func (r *sysRunner) opKill() {
	var live []*sysWorker
	for _, w := range r.workers {
		if w.p.running() && !r.unrescuedVictim(w) {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return
	}
	w := live[r.rng.IntN(len(live))]
	down := time.Duration(r.rng.IntN(1500)) * time.Millisecond
	op := r.begin("fault-kill", fmt.Sprintf("%s pid %d, restart after %s", w.name, w.p.pid(), down))
	r.hooks.set(w.hookAddr, false)
	w.p.kill()
	w.pausedUntil = time.Time{}
	w.restartAt = time.Now().Add(down)
	r.end(op, outYes, nil)
}

// restartDead starts again the workers whose down time is over (all of
// them with force).
func (r *sysRunner) restartDead(force bool) {
	for _, w := range r.workers {
		if w.p.running() || (!force && time.Now().Before(w.restartAt)) {
			continue
		}
		w.restarts++
		w.p = startProc(r.t, fmt.Sprintf("%s.%d", w.name, w.restarts), r.e, w.args...)
		w.all = append(w.all, w.p)
		r.hooks.set(w.hookAddr, true)
	}
}

// opPGRestart stops PostgreSQL with `pg_ctl stop -m immediate` and starts
// it again after a drawn outage.
func (r *sysRunner) opPGRestart() {
	if r.unrescuedActive() {
		return // no lease ends in the restart's grace: the fault would not end
	}
	down := time.Duration(200+r.rng.IntN(1300)) * time.Millisecond
	op := r.begin("fault-pg-restart", fmt.Sprintf("down %s", down))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.cluster.Crash(ctx); err != nil {
		r.t.Fatalf("crash PostgreSQL: %v", err)
	}
	time.Sleep(down) // the outage itself, not a synchronisation
	if err := r.cluster.Start(ctx); err != nil {
		r.t.Fatalf("start PostgreSQL: %v", err)
	}
	r.end(op, outYes, nil)
	// The workers' statements fail until they reconnect (rule 16).
	r.faultSpan(op.Start, op.End.Add(2*time.Second))
}
