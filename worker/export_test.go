package worker

import (
	"time"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// SetQuotaClock makes the budget of a worker made from cfg count quotas by
// now rather than the database's clock, so a test can move past midnight.
func SetQuotaClock(cfg *Config, now func() time.Time) { cfg.now = now }

// SetAfterSend makes w run f after the API answered each send and before
// its outcome is recorded; an error from f stands for a failure in that
// window. Set it before Start.
func SetAfterSend(w *Worker, f func(key string) error) { w.sendWorker.afterSend = f }

// SetReportInterval makes a worker made from cfg write its DrainReportArgs
// job every d.
func SetReportInterval(cfg *Config, d time.Duration) { cfg.reportInterval = d }

// SetAfterFreezeDue makes the drain of w, coalescing, call f with the
// batches and members each of its freezes of due intents froze. Set it
// before Start.
func SetAfterFreezeDue(w *Worker, f func(batches, members int)) {
	if w.drain.coalesce != nil {
		w.drain.coalesce.afterFreeze = func(r sendstate.FrozenDue) { f(r.Batches, r.Members) }
	}
}

// SetAfterClaimAhead makes the drain of w call f with the number of
// intents each claim left for the slots about to get a token. Set it
// before Start.
func SetAfterClaimAhead(w *Worker, f func(n int)) { w.drain.afterAhead = f }
