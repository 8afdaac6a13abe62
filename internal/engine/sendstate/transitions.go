package sendstate

import "github.com/sendonce/sendonce/outbox"

// NoRow stands, in a Transition, for an intent that has no row: the From
// of an insert, the To of a delete.
const NoRow outbox.State = ""

// Transition is one move of an intent's state (sendonce_outbox.state) that
// a statement of sendonce makes.
type Transition struct {
	From, To outbox.State
	// Statement is the function whose statement makes the move: a
	// function of this package ("ClaimMany"), of package outbox
	// ("outbox.Cancel"), or "INSERT" for a producer's plain SQL.
	Statement string
	// Case tells apart the moves of one statement from one state to
	// different states ("" when there is one).
	Case string
	// By is who makes it.
	By string
	// Rule is what the statement asks of the row besides its state, and
	// what the move means.
	Rule string
}

// Transitions is every move of an intent's state that sendonce makes, read
// from the WHERE clauses of the statements that set the state (a move from
// a state to itself is a statement that sets the state it finds: a claim
// that finds an intent sending, say). A statement moves a row in any other
// state nowhere: TestTransitions puts a row in each state under each
// statement and holds the code to this table, and docs/states.md shows it.
//
// Some statements hand an intent on without moving its state, and are not
// here: RescueAbandoned, RescueStranded and Reconcile (and their batch
// forms) give an intent of an upgraded database (one with River jobs of
// its own) a new River job, Freeze and FreezeDue bind intents into a
// batch, ResumeRun and RescheduleRun hand a run's members with such jobs
// to the drain (and RescheduleRun gives every member not yet attempted a
// new send_at). A delivery event changes delivery_status,
// a column of its own.
var Transitions = []Transition{
	{From: NoRow, To: outbox.StatePending, Statement: "outbox.Enqueue",
		By: "a producer in Go: Enqueue, EnqueueMany, EnqueueRun, a schedule's run",
		Rule: "a key with no row; a key with one leaves it as it is (Existing), a pruned key answers from its " +
			"tombstone, a new member of a canceled run is refused. No River job (job_id NULL): the drain claims it"},
	{From: NoRow, To: outbox.StatePending, Statement: "INSERT",
		By: "a producer's plain SQL",
		Rule: "as Enqueue (ON CONFLICT (idempotency_key) DO NOTHING leaves a row as it is); no River job " +
			"(job_id NULL): the drain claims it"},

	{From: outbox.StatePending, To: outbox.StateSending, Statement: "ClaimMany",
		By: "a River job's claim (Claim, ClaimMany)",
		Rule: "the row names the claiming job (job_id), its run is not paused, the claimer's lease is held. One " +
			"attempt more; the first claim stamps first_attempt_at and looks the recipients up on the suppression list"},
	{From: outbox.StateSending, To: outbox.StateSending, Statement: "ClaimMany",
		By: "a River job's claim (Claim, ClaimMany)",
		Rule: "as from pending: the job runs again after its worker died (or beside a run River took for stuck); " +
			"the intent becomes uncertain and is sent again under its key, which the API replays"},
	{From: outbox.StatePending, To: outbox.StateSending, Statement: "ClaimDue",
		By: "a worker's drain",
		Rule: "no River job (job_id NULL); due (next_attempt_at, else send_at, else created_at, is past); its run " +
			"is not paused; the drain's lease is held; rows another drain has locked are skipped; with coalescing, " +
			"a never-attempted email in no batch only once the coalesce wait and CoalesceGrace have passed since it came due " +
			"(FreezeDue may batch it meanwhile). Never from sending: a drained intent left sending waits for RescueDrained"},
	{From: outbox.StatePending, To: outbox.StateSending, Statement: "ClaimBatch",
		By: "a batch job's claim, for each member",
		Rule: "the batch names the job and is pending or sending, its run is not paused, the claimer's lease is " +
			"held; the member is still bound to the batch (batch_key)"},
	{From: outbox.StateSending, To: outbox.StateSending, Statement: "ClaimBatch",
		By:   "a batch job's claim, for each member",
		Rule: "as from pending: the batch's job runs again after a crash; the member becomes uncertain with the batch"},

	{From: outbox.StatePending, To: outbox.StateSent, Statement: "MarkSentMany",
		By: "a worker recording the API's success (MarkSent, MarkSentMany; RecordBatch for a batch's accepted members)",
		Rule: "whichever job got the answer; with an owner, only while the row's claim is the owner's " +
			"(claimed_by) and its lease is held"},
	{From: outbox.StateSending, To: outbox.StateSent, Statement: "MarkSentMany",
		By:   "a worker recording the API's success (MarkSent, MarkSentMany; RecordBatch for a batch's accepted members)",
		Rule: "as from pending: the usual end of an attempt"},
	{From: outbox.StateFailed, To: outbox.StateSent, Statement: "MarkSentMany",
		By: "a worker recording the API's success (MarkSent, MarkSentMany; RecordBatch for a batch's accepted members)",
		Rule: "sent over failed: a late success wins, whoever's claim it was and whether or not its lease is " +
			"held (the attempt overlapped the one that parked it); last_error keeps the failure"},

	{From: outbox.StatePending, To: outbox.StateFailed, Statement: "MarkFailed",
		By: "a worker parking an intent it gives up on (a refusal, its attempts or replay window spent, a " +
			"changed API key), or a batch's first claim parking a member it cannot strip of suppressed recipients",
		Rule: "the row names the job (none, for a drained intent); with an owner, the row's claim is the owner's " +
			"and its lease is held. From pending: the batch's first claim parks a member before claiming it"},
	{From: outbox.StateSending, To: outbox.StateFailed, Statement: "MarkFailed",
		By: "a worker parking an intent it gives up on (a refusal, its attempts or replay window spent, a " +
			"changed API key), or a batch's first claim parking a member it cannot strip of suppressed recipients",
		Rule: "as from pending: the end of an attempt that will not be tried again"},
	{From: outbox.StatePending, To: outbox.StatePending, Statement: "MarkPending",
		By: "a worker recording an attempt to try again (a 5xx, a network error, a 429, a shutdown)",
		Rule: "as MarkFailed. From pending: no caller needs it (a worker records what it claimed), but a " +
			"second record of one attempt would be taken"},
	{From: outbox.StateSending, To: outbox.StatePending, Statement: "MarkPending",
		By: "a worker recording an attempt to try again (a 5xx, a network error, a 429, a shutdown)",
		Rule: "as MarkFailed; a drained intent is due again at next_attempt_at; the claim stays the owner's " +
			"(claimed_by is kept)"},
	{From: outbox.StatePending, To: outbox.StateSuppressed, Statement: "MarkSuppressed",
		By: "a worker whose first claim found every recipient suppressed (or some, under the park policy), " +
			"or a batch's first claim parking such a member",
		Rule: "as MarkFailed; the claim is undone (no attempts, no first attempt, not uncertain): nothing reached " +
			"the API. From pending: the batch's first claim parks a member before claiming it"},
	{From: outbox.StateSending, To: outbox.StateSuppressed, Statement: "MarkSuppressed",
		By: "a worker whose first claim found every recipient suppressed (or some, under the park policy), " +
			"or a batch's first claim parking such a member",
		Rule: "as from pending"},

	{From: outbox.StatePending, To: outbox.StatePending, Statement: "MarkBatchPending",
		By: "a batch job recording an attempt to try again, for each member",
		Rule: "the batch names the job and is pending or sending; with an owner, its claim is the owner's and its " +
			"lease is held; no later claim superseded the attempt; the member is still bound to the batch"},
	{From: outbox.StateSending, To: outbox.StatePending, Statement: "MarkBatchPending",
		By:   "a batch job recording an attempt to try again, for each member",
		Rule: "as from pending"},
	{From: outbox.StatePending, To: outbox.StateFailed, Statement: "MarkBatchFailed",
		By:   "a batch job parking its batch, for each member",
		Rule: "as MarkBatchPending"},
	{From: outbox.StateSending, To: outbox.StateFailed, Statement: "MarkBatchFailed",
		By:   "a batch job parking its batch, for each member",
		Rule: "as MarkBatchPending"},
	{From: outbox.StatePending, To: outbox.StateFailed, Statement: "RecordBatch", Case: "a member the API refused",
		By: "a batch job recording the API's answer, for each member it refused",
		Rule: "the batch is failed, or its claim is the owner's (lease held) and not superseded; the member is " +
			"still bound to the batch. The accepted members are MarkSentMany's"},
	{From: outbox.StateSending, To: outbox.StateFailed, Statement: "RecordBatch", Case: "a member the API refused",
		By:   "a batch job recording the API's answer, for each member it refused",
		Rule: "as from pending"},
	{From: outbox.StatePending, To: outbox.StatePending, Statement: "Batcher.Split",
		By: "a batch job splitting a batch the API refused whole, for each member",
		Rule: "the batch names the job, is pending or sending, its claim is the owner's and not superseded, and " +
			"it is not uncertain; the member is still bound to it. It is unbound and sent again, alone " +
			"by the drain (no River job) or in a new batch (first_attempt_at cleared: nothing of it was delivered)"},
	{From: outbox.StateSending, To: outbox.StatePending, Statement: "Batcher.Split",
		By:   "a batch job splitting a batch the API refused whole, for each member",
		Rule: "as from pending"},
	{From: outbox.StatePending, To: outbox.StateFailed, Statement: "Batcher.Split", Case: "the member the API named",
		By:   "a batch job splitting a batch the API refused whole because of one member",
		Rule: "as the split's other members; that member is parked with the API's reason"},
	{From: outbox.StateSending, To: outbox.StateFailed, Statement: "Batcher.Split", Case: "the member the API named",
		By:   "a batch job splitting a batch the API refused whole because of one member",
		Rule: "as from pending"},
	{From: outbox.StatePending, To: outbox.StateCanceled, Statement: "Batcher.Split", Case: "its run canceled",
		By: "a batch job splitting a batch of a run canceled while the batch was in flight",
		Rule: "as the split's other members: the refusal proves nothing was sent, and a canceled run sends none " +
			"of its unsent members"},
	{From: outbox.StateSending, To: outbox.StateCanceled, Statement: "Batcher.Split", Case: "its run canceled",
		By:   "a batch job splitting a batch of a run canceled while the batch was in flight",
		Rule: "as from pending"},

	{From: outbox.StateSending, To: outbox.StatePending, Statement: "RescueDrained",
		By: "the fleet's sweeper",
		Rule: "no River job and no batch; claimed under a lease that has ended; the database server started " +
			"longer ago than the restart grace. The intent becomes uncertain and due at once, and its next claim " +
			"replays it (an intent with a job stays sending: RescueAbandoned gives it a new job)"},

	{From: outbox.StateSending, To: outbox.StatePending, Statement: "ReleaseDrained",
		By: "the drain whose attempt's outcome could not be recorded",
		Rule: "no River job and no batch; still sending under the drain's own claim. The intent becomes uncertain " +
			"and due at once, and its next claim replays it; after a recorded outcome it changes nothing"},
	{From: outbox.StateSending, To: outbox.StatePending, Statement: "UnclaimDrained",
		By: "the drain, for an intent it claimed ahead for a slot about to get a token, which no slot took in time " +
			"(the budget stopped granting, or the worker stopped)",
		Rule: "no River job and no batch; still sending under the drain's own claim, never attempted. The intent is " +
			"as it was before the claim: due at once, the claim's attempt and try not counted, uncertain as it was, " +
			"and what the claim spent of its tenant's rate and quotas given back"},
	{From: outbox.StateSending, To: outbox.StateCanceled, Statement: "UnclaimDrained", Case: "its run canceled",
		By: "the drain, for an intent it claimed ahead, of a run canceled while the claim waited",
		Rule: "as to pending; the run's cancel left the member to its send, which never came, so it is canceled " +
			"as the cancel would have canceled it unclaimed: when no attempt before this claim may have reached the API " +
			"(one attempted before goes back to pending, to be sent again under its key)"},
	{From: outbox.StateSending, To: outbox.StatePending, Statement: "ReleaseOrphans",
		By: "the worker that claimed it, at each sweep interval for a while after a failed claim, and every 60",
		Rule: "no River job and no batch; sending under the worker's own claim, claimed more than a few seconds ago, " +
			"and not in flight in the worker (a claim whose answer was lost with the connection). The intent becomes " +
			"uncertain and due at once, and its next claim replays it"},

	{From: outbox.StatePending, To: outbox.StateCanceled, Statement: "outbox.Cancel",
		By: "an operator: Cancel, sendonce cancel, the outbox page",
		Rule: "never attempted (attempts 0), or retrying after attempts none of which may have reached the API " +
			"(not uncertain: each refused before the request left, or answered with a 429; and never retried with " +
			"force, which clears uncertain), and not frozen into a batch: nothing can have reached the API. Its River " +
			"job is cancelled in the same transaction"},
	{From: outbox.StatePending, To: outbox.StateCanceled, Statement: "outbox.CancelRun",
		By: "an operator canceling a run: CancelRun, sendonce run cancel",
		Rule: "a member of the run never attempted (attempts 0) or released by a split (first_attempt_at NULL), in " +
			"no batch or in one never attempted, canceled with it. Members attempted already are left as they are"},
	{From: outbox.StateFailed, To: outbox.StatePending, Statement: "outbox.Retry",
		By: "an operator: Retry, sendonce retry, the outbox page",
		Rule: "not uncertain, or within the replay window from its first attempt, or forced (a new window). A " +
			"member of a batch, uncertain, within the window, goes again with the batch, whole, under its key, and " +
			"only while the batch is failed (a new River job for the batch); otherwise back to the drain (job_id NULL), with all its tries"},
	{From: outbox.StateSuppressed, To: outbox.StatePending, Statement: "outbox.Retry",
		By: "an operator: Retry, sendonce retry, the outbox page",
		Rule: "unless every recipient is still on the suppression list. Back to the drain (job_id NULL), whose " +
			"first claim looks the recipients up again"},

	{From: outbox.StateSent, To: NoRow, Statement: "Prune",
		By: "retention: the workers' pruner, sendonce prune",
		Rule: "settled longer than the retention ago; its batch and its run have nothing unsettled; its River " +
			"job, if any, is finished. A tombstone keeps the key"},
	{From: outbox.StateFailed, To: NoRow, Statement: "Prune",
		By:   "retention: the workers' pruner, sendonce prune",
		Rule: "as sent; a pruned failed intent can no longer be retried"},
	{From: outbox.StateCanceled, To: NoRow, Statement: "Prune",
		By:   "retention: the workers' pruner, sendonce prune",
		Rule: "as sent"},
	{From: outbox.StateSuppressed, To: NoRow, Statement: "Prune",
		By:   "retention: the workers' pruner, sendonce prune",
		Rule: "as sent"},
}
