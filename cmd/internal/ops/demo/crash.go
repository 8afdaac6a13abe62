package demo

import (
	"context"
	"fmt"
	"strings"
	"time"
)

const (
	pollEvery = 100 * time.Millisecond
	// firstWorkerLimit bounds the wait for worker 1 to reach the kill.
	firstWorkerLimit = 45 * time.Second
	// recoveryLimit bounds the wait for every intent to settle after it.
	recoveryLimit = 75 * time.Second
)

// runResult is what happened to the workers, for the report.
type runResult struct {
	Killed bool
	// Interrupted are the keys the API had delivered but the outbox had not
	// recorded when worker 1 died: the sends the kill cut in half.
	Interrupted []string
	// Recovery is from the kill until every intent was settled.
	Recovery time.Duration
	// Last is the worker still running: worker 2, or worker 1 when there
	// was nothing to kill. The bounce step stops it.
	Last *workerProc
}

// runWorkers is step 4: worker 1 sends until the kill lands in a window,
// worker 2 finishes and is left running for the bounce step.
//
// It is long because it is the demo's story (start, wait for the window,
// kill, restart, wait for the end) in the order it happens.
func (d *demo) runWorkers(ctx context.Context) (*runResult, error) {
	total := len(d.plan.committed())
	res := &runResult{}
	d.section(4, "Workers: sending, a crash, a restart")
	args := workerArgs(d.hookAddr)
	d.say("A worker is a separate process, sendonce work, here with short timeouts (in production")
	d.say("they are minutes):")
	for i, line := range wrapFlags(args, 70) {
		if i == 0 {
			d.say("  sendonce work %s", line)
		} else {
			d.say("                %s", line)
		}
	}

	w1, err := d.startWorker(1)
	if err != nil {
		return nil, err
	}
	d.say("Worker 1 (pid %d) is sending. It gets SIGKILL once a third of the emails are out and", w1.pid)
	d.say("some email sits in the window: delivered by the API, not yet marked sent in the outbox.")

	b := d.newBar(total, "worker 1")
	deadline := time.Now().Add(firstWorkerLimit)
	var c counts
	for {
		if c, err = d.poll(ctx, w1, b, deadline, "worker 1 to reach the kill"); err != nil {
			b.close()
			return nil, err
		}
		if c.Settled >= total {
			break
		}
		if c.Sent*3 < total {
			continue
		}
		window, err := d.deliveredUnrecorded(ctx)
		if err != nil {
			b.close()
			return nil, err
		}
		if len(window) > 0 {
			w1.kill()
			res.Killed = true
			break
		}
	}
	killedAt := time.Now()
	b.close()

	if !res.Killed {
		d.say("Every email went out before one could be caught in the window: nothing to kill this time.")
		res.Last = w1
		return res, nil
	}

	// Let the fake API finish with the dead worker's requests, so its
	// ledger is final for them before it is compared with the outbox.
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_ = d.fake.WaitRequests(waitCtx, len(d.fake.Requests()))
	cancel()
	if res.Interrupted, err = d.deliveredUnrecorded(ctx); err != nil {
		return nil, err
	}
	if c, err = d.readCounts(ctx); err != nil {
		return nil, err
	}
	d.say("SIGKILL: worker 1 (pid %d) is dead, %d of %d emails recorded sent.", w1.pid, c.Sent, total)
	if n := len(res.Interrupted); n > 0 {
		d.say("The API had delivered %d more that the outbox never heard of:", n)
		d.say("  %s", sample(res.Interrupted, 3))
		d.say("Their intents stay in state \"sending\", their River jobs in \"running\".")
	} else {
		d.say("The sends it had in flight had not reached the API yet; they stay \"sending\".")
	}

	w2, err := d.startWorker(2)
	if err != nil {
		return nil, err
	}
	d.say("Worker 2 (pid %d) starts and at once sends what nobody had started. The interrupted", w2.pid)
	d.say("intents were claimed under worker 1's lease, which it no longer renews: once it lapses")
	d.say("(--lease %s here), worker 2's sweeper gives them new jobs. (River's rescuer, which reclaims jobs", lease)
	d.say("running longer than --rescue-after, %s here and minutes in production, is not what brings", rescueAfter)
	d.say("them back.)")

	b = d.newBar(total, "worker 2")
	b.set(c.Sent)
	deadline = time.Now().Add(recoveryLimit)
	var replaySaid bool
	for c.Settled < total {
		if c, err = d.poll(ctx, w2, b, deadline, "every intent to be sent after the kill"); err != nil {
			b.close()
			return nil, err
		}
		if !replaySaid && len(res.Interrupted) > 0 && c.Replayed >= len(res.Interrupted) {
			b.println("+%s  worker 2 sent the %d interrupted intents again, with their keys: the API answered",
				round(time.Since(killedAt)), len(res.Interrupted))
			b.println("        with the messages it had delivered (replayed: true) and sent nothing new.")
			replaySaid = true
		}
		if c.Replayed < len(res.Interrupted) && c.Sent >= total-len(res.Interrupted) {
			b.describe("worker 2, taking over the interrupted sends")
		} else {
			b.describe("worker 2")
		}
	}
	b.close()
	res.Recovery = time.Since(killedAt)
	d.say("All %d intents sent, %s after the kill.", total, round(res.Recovery))
	res.Last = w2
	return res, nil
}

// poll is one step of a progress loop: it waits for the next tick of w's
// run, reads the counts and moves the bar to them.
func (d *demo) poll(ctx context.Context, w *workerProc, b *bar, deadline time.Time, what string) (counts, error) {
	if err := d.tick(ctx, w, deadline, what); err != nil {
		return counts{}, err
	}
	c, err := d.readCounts(ctx)
	if err != nil {
		return counts{}, err
	}
	b.set(c.Sent)
	return c, nil
}

// tick waits for the next poll, and fails when ctx ends, the deadline has
// passed or the worker has died.
func (d *demo) tick(ctx context.Context, w *workerProc, deadline time.Time, what string) error {
	t := time.NewTimer(pollEvery)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return w.died()
	case <-t.C:
	}
	if time.Now().After(deadline) {
		c, _ := d.readCounts(ctx)
		return fmt.Errorf("demo: gave up waiting for %s: %d of %d intents sent; worker %d's last lines:\n%s",
			what, c.Sent, len(d.plan.committed()), w.n, w.logs.tail())
	}
	return nil
}

// stopLast stops the last worker the way an operator would: SIGTERM, which
// lets the sends in flight finish.
func (d *demo) stopLast(w *workerProc) error {
	killed, err := w.stop(20 * time.Second)
	switch {
	case killed:
		return fmt.Errorf("demo: %w: worker %d (pid %d) ignored SIGTERM for 20s and was killed; its last lines:\n%s",
			errWorkerExit, w.n, w.pid, w.logs.tail())
	case err != nil:
		return fmt.Errorf("demo: %w: worker %d (pid %d) exited with %v on SIGTERM; its last lines:\n%s",
			errWorkerExit, w.n, w.pid, err, w.logs.tail())
	}
	d.say("Worker %d got SIGTERM, finished its sends and exited 0.", w.n)
	return nil
}

// wrapFlags joins command-line flags into lines of at most width
// characters, keeping each flag with its value.
func wrapFlags(args []string, width int) []string {
	var lines []string
	line := ""
	for i := 0; i < len(args); i++ {
		item := args[i]
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			i++
			item += " " + args[i]
		}
		if line != "" && len(line)+1+len(item) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += item
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// sample names up to n of keys.
func sample(keys []string, n int) string {
	if len(keys) == 0 {
		return "none"
	}
	if len(keys) <= n {
		return strings.Join(keys, ", ")
	}
	return strings.Join(keys[:n], ", ") + ", …"
}
