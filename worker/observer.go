package worker

import (
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// Result names what became of one attempt to send an intent.
type Result string

// The results an Observer sees.
const (
	ResultSent     Result = "sent"     // the API accepted a fresh send
	ResultReplayed Result = "replayed" // the API replayed an earlier delivery
	ResultRetry    Result = "retry"    // failed for now; River tries again later
	ResultSnoozed  Result = "snoozed"  // rate limited; River tries again after the asked wait
	ResultFailed   Result = "failed"   // parked as failed (permanent error or limits reached)
	ResultExpired  Result = "expired"  // parked as failed: the replay window ran out
	ResultSkipped  Result = "skipped"  // the job found its intent already settled
	// ResultSuppressed: parked as suppressed, no API call (its recipients
	// are on the suppression list).
	ResultSuppressed Result = "suppressed"

	// Coalescing's events.
	ResultCoalesced Result = "coalesced" // the intent joined a batch; the batch's job sends it
	ResultSplit     Result = "split"     // the API refused a batch whole; it was split to find the cause

	// The budget's events, before or around an attempt.
	ResultRateLimited   Result = "rate_limited"   // the API answered 429; the fleet slows down
	ResultBudgetToken   Result = "budget_token"   // a send got its token (BudgetWait says after how long)
	ResultBudgetSnoozed Result = "budget_snoozed" // no token came in time: the job waits outside its slot
)

// Outcome is one attempt's result.
type Outcome struct {
	Kind   outbox.Kind
	Result Result
	// APILatency is how long the client call took, retries included; zero
	// when no call was made.
	APILatency time.Duration
	// BudgetWait is how long the send waited for the fleet's budget (for
	// ResultBudgetToken and ResultBudgetSnoozed).
	BudgetWait time.Duration
}

// Observer is told of every outcome, for metrics. It must be safe for
// concurrent use and quick.
type Observer interface {
	Observe(Outcome)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Outcome)

// Observe calls f.
func (f ObserverFunc) Observe(o Outcome) { f(o) }

type nopObserver struct{}

func (nopObserver) Observe(Outcome) {}
