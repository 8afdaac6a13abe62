package worker

import (
	"log/slog"

	"github.com/riverqueue/river/rivertype"

	"github.com/sendonce/sendonce/outbox"
)

// rescuerError is the error River's rescuer records on a job it found
// running too long (its worker died) before it runs it again (River v0.51,
// maintenance.JobRescuer). A job that ran again after it is a crash
// recovery, not a retry by hand.
const rescuerError = "Stuck job rescued by JobRescuer"

// rerunByHand reports whether a job that found its intent settled was run
// again by an operator, such as with Retry in the River UI: it ran before
// (attempt 2 or more), and its previous attempt ended in a final state
// River never leaves by itself (completed, or cancelled by the worker when
// it parked the intent failed), not in a rescue. A retryable error of the
// previous attempt means River ran it again on its own.
func rerunByHand(job *rivertype.JobRow, settled outbox.State) bool {
	if job.Attempt < 2 {
		return false
	}
	for _, e := range job.Errors {
		if e.Attempt != job.Attempt-1 {
			continue
		}
		if e.Error == rescuerError {
			return false
		}
		// The worker cancels the job of an intent it parks failed: that
		// error is the cancellation's, final unless someone retries it.
		return settled == outbox.StateFailed
	}
	return true
}

// warnRerun tells the operator who retried a settled intent's job in the
// River UI that nothing was sent, and what does what they meant.
func warnRerun(log *slog.Logger, key string, state outbox.State) {
	var instead string
	switch state {
	case outbox.StateFailed:
		instead = "to send it again run `sendonce retry " + key + "` (or Retry on the outbox page, with --ui-actions)"
	case outbox.StateSuppressed:
		instead = "take its recipients off the suppression list (`sendonce suppression remove ADDRESS`), then run `sendonce retry " + key + "`"
	case outbox.StateSent:
		instead = "it was delivered already; to send the email again, enqueue it under a new key"
	default:
		instead = "to send it, enqueue it under a new key"
	}
	log.Warn("River job run again by hand (a River UI retry?) for an intent that is "+string(state)+
		": nothing was sent, and the intent stays "+string(state)+"; "+instead,
		"state", string(state), "instead", instead)
}
