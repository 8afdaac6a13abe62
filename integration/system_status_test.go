package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Rule 17 (issue 47): the status callbacks. Every seed's database is, to
// sendonce, an application that keeps its own table of what became of each
// email through the SQL interface: it defines sendonce_on_status, which
// appends each transition to app_status_log, and enables the hook, before
// the workers start. So every statement of every worker, operator and
// webhook that records a transition calls it, in that statement's
// transaction, through kills, PostgreSQL restarts, webhook replays, the
// claim-commit fault and everything else the schedule does. After
// quiescence the checker holds the application's table to the committed
// transitions, key by key (its state transitions, sent, failed, suppressed
// and canceled, and its delivery transitions, delivered, bounced and
// complained, each in the log's order):
//
//	no missing: an intent whose final state is sent, failed, suppressed or
//	  canceled has it as its last state transition; a final delivery status
//	  delivered, bounced or complained (of a pruned row, its last snapshot's)
//	  is its last delivery transition (is among them); an intent the API
//	  delivered has a sent unless it ended failed (an answer lost, then
//	  parked: rule 6 allows it) or unsettled (an answer lost under an
//	  ended lease, and the intent held pending by its tenant's daily quota
//	  since: rule 14; it goes again under its key, replayed, when the quota
//	  allows); each retry certainly answered follows a
//	  failed or suppressed of its own (the k-th retry, k of them logged
//	  before its answer); a pending intent's last state transition was
//	  retried after it.
//	no repeats: two equal state transitions in a row only with a retry
//	  answered between them (failed, retried, failed again); two equal
//	  delivery transitions in a row only for bounced, with an email.failed
//	  or email.suppressed event of its messages that may have been stored
//	  (the three rank the same, and the latest event wins, so a status may
//	  go bounced, failed, bounced).
//	none uncommitted: every transition is one its history allows. After sent
//	  or canceled nothing; after failed only sent (a late success) or,
//	  after a retry answered between them, anything; after suppressed
//	  anything after a retry. A sent only for a key the API delivered; a
//	  canceled only for a key the API never delivered, after a cancel of it
//	  or its run that did not certainly fail began; a suppressed only for a
//	  key one of whose recipients was ever suppressed. A delivery transition
//	  only after a sent of its key (the status is matched by the message id
//	  the sent recorded), to a status an event of its messages that may have
//	  been stored gives, and never to a lower rank than the one before
//	  (delivered, then bounced, then complained). And no transition of a
//	  key no intent of the schedule has.

// sysStatusSQL is the application's side of the SQL interface: its table,
// its sendonce_on_status, and the hook enabled. Installed after the
// migrations, before any worker starts.
const sysStatusSQL = `
CREATE TABLE app_status_log (seq bigserial PRIMARY KEY, key text NOT NULL, transition text NOT NULL,
	kind text NOT NULL, run_key text, message_id text NOT NULL,
	at timestamptz NOT NULL DEFAULT clock_timestamp(), txid xid8 NOT NULL DEFAULT pg_current_xact_id());
CREATE FUNCTION sendonce_on_status(s sendonce_status) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO app_status_log (key, transition, kind, run_key, message_id)
		VALUES (s.idempotency_key, s.transition, s.kind, s.run_key, s.message_id);
END $$;
SELECT sendonce_status_hook_enable();
`

func installStatusLog(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, sysStatusSQL); err != nil {
		t.Fatalf("install the application's status log: %v", err)
	}
}

// sysStatusEntry is one line of app_status_log.
type sysStatusEntry struct {
	Seq                               int64
	Key, Transition, Kind, Run, MsgID string
	At                                time.Time
	Txid                              uint64
}

func (e sysStatusEntry) String() string {
	return fmt.Sprintf("#%d %s %s at %s tx %d (message %q)", e.Seq, e.Key, e.Transition, e.At.Format("15:04:05.000000"), e.Txid, e.MsgID)
}

func readStatusLog(ctx context.Context, pool *pgxpool.Pool) ([]sysStatusEntry, error) {
	rows, err := pool.Query(ctx, `SELECT seq, key, transition, kind, coalesce(run_key, ''), message_id, at, txid::text::bigint
		FROM app_status_log ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sysStatusEntry
	for rows.Next() {
		var e sysStatusEntry
		var tx int64
		if err := rows.Scan(&e.Seq, &e.Key, &e.Transition, &e.Kind, &e.Run, &e.MsgID, &e.At, &tx); err != nil {
			return nil, err
		}
		e.Txid = uint64(tx)
		out = append(out, e)
	}
	return out, rows.Err()
}

var (
	sysStateTransitions    = map[string]bool{"sent": true, "failed": true, "suppressed": true, "canceled": true}
	sysDeliveryTransitions = map[string]bool{"delivered": true, "bounced": true, "complained": true}
)

// checkStatusLog is rule 17.
func (m *model) checkStatusLog(f sysFinal) {
	byKey := map[string][]sysStatusEntry{}
	var keys []string
	for _, e := range f.statusLog {
		if byKey[e.Key] == nil {
			keys = append(keys, e.Key)
		}
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	for _, k := range m.order {
		if byKey[k] == nil {
			keys = append(keys, k)
		}
	}
	delivered := map[string]int{}
	for _, d := range f.deliveries {
		c, _ := causeOf(d)
		delivered[keyOfCause(c)]++
	}
	// The retries and cancels of each key that may have committed (a
	// run's cancels are m.runOps).
	retries := map[string][]*sysOp{}
	cancels := map[string][]time.Time{} // when each cancel of a key began
	for _, op := range m.ops {
		if len(op.Keys) == 0 || strings.HasPrefix(op.Result, outNo.String()) {
			continue
		}
		switch op.Kind {
		case "retry":
			retries[op.Keys[0]] = append(retries[op.Keys[0]], op)
		case "cancel":
			cancels[op.Keys[0]] = append(cancels[op.Keys[0]], op.Start)
		}
	}
	// A retry of a batch's member retries the batch: its other failed
	// members go back to pending with it (outbox.Retry), so a retry of a
	// batch-mate counts as one between two transitions of a key (seed
	// 4002: a member failed, its mate retried, both failed again).
	mateRetries := map[string][]*sysOp{}
	for _, b := range f.batches {
		for _, k := range b.Members {
			for _, mate := range b.Members {
				if mate != k {
					mateRetries[k] = append(mateRetries[k], retries[mate]...)
				}
			}
		}
	}
	retriedBetween := func(key string, a, b time.Time) bool {
		between := func(op *sysOp) bool { return op.End.After(a) && op.Start.Before(b) }
		return slices.ContainsFunc(retries[key], between) || slices.ContainsFunc(mateRetries[key], between)
	}

	for _, key := range keys {
		log := byKey[key]
		in := m.intents[key]
		row, hasRow := f.rows[key]
		if !hasRow {
			row, hasRow = m.snap[key]
		}
		say := func(format string, args ...any) {
			text := fmt.Sprintf(format, args...)
			var lines []string
			for _, e := range log {
				lines = append(lines, e.String())
			}
			if len(lines) == 0 {
				lines = []string{"(nothing)"}
			}
			fin := "no row"
			if hasRow {
				fin = fmt.Sprintf("%s, delivery status %q, messages %q, pruned %v", row.State, row.Delivery, row.MessageID, row.Pruned)
			}
			m.violate("17", []string{key}, nil, "%s; final: %s; delivered %d time(s); the application's log of it: %s",
				text, fin, delivered[key], strings.Join(lines, "; "))
		}
		if in == nil && !hasRow {
			say("%s: transitions logged for a key no intent of the schedule has", key)
			continue
		}
		var states, dels []sysStatusEntry
		for _, e := range log {
			switch {
			case sysStateTransitions[e.Transition]:
				states = append(states, e)
			case sysDeliveryTransitions[e.Transition]:
				dels = append(dels, e)
			default:
				say("%s: a transition %q, which is none of the interface's", key, e.Transition)
			}
		}

		// No missing.
		if hasRow && sysStateTransitions[row.State] {
			if len(states) == 0 || states[len(states)-1].Transition != row.State {
				say("%s ended %s, but that is not its last state transition in the application's log (missing)", key, row.State)
			}
		}
		if hasRow && (row.State == "pending" || row.State == "sending") && len(states) > 0 {
			last := states[len(states)-1]
			if !retriedBetween(key, last.At, farFuture) {
				say("%s ended %s, but its last state transition in the log, %s, was not retried after it (a transition after it missing, or %s uncommitted)",
					key, row.State, last.Transition, last.Transition)
			}
		}
		if hasRow && sysDeliveryTransitions[row.Delivery] {
			switch {
			case row.Pruned && !slices.ContainsFunc(dels, func(e sysStatusEntry) bool { return e.Transition == row.Delivery }):
				say("%s (pruned) had delivery status %s, but the log has no such delivery transition of it (missing)", key, row.Delivery)
			case !row.Pruned && (len(dels) == 0 || dels[len(dels)-1].Transition != row.Delivery):
				say("%s ended with delivery status %s, but that is not its last delivery transition in the log (missing)", key, row.Delivery)
			}
		}
		if delivered[key] > 0 && hasRow && !slices.Contains([]string{"failed", "pending", "sending"}, row.State) && !slices.ContainsFunc(states, func(e sysStatusEntry) bool { return e.Transition == "sent" }) {
			say("%s was delivered by the API and ended %s, but the log has no sent of it (missing)", key, row.State)
		}
		var certain []*sysOp
		for _, op := range retries[key] {
			if op.Result == outYes.String() {
				certain = append(certain, op)
			}
		}
		slices.SortFunc(certain, func(a, b *sysOp) int { return a.End.Compare(b.End) })
		for k, op := range certain {
			n := 0
			for _, e := range states {
				if (e.Transition == "failed" || e.Transition == "suppressed") && e.At.Before(op.End) {
					n++
				}
			}
			if n < k+1 {
				say("%s: retry #%d answered at %s is the %d-th certain retry of it, but the log has %d failed or suppressed of it before (missing)",
					key, op.Seq, op.End.Format("15:04:05.000"), k+1, n)
				break
			}
		}

		// No repeats, none uncommitted: the state transitions in order.
		for i, e := range states {
			if i > 0 {
				prev := states[i-1]
				retried := retriedBetween(key, prev.At, e.At)
				switch {
				case prev.Transition == "sent" || prev.Transition == "canceled":
					if prev.Transition == e.Transition {
						say("%s: %s logged twice in a row (#%d, #%d; repeated): %s is final", key, e.Transition, prev.Seq, e.Seq, prev.Transition)
					} else {
						say("%s: %s (#%d) logged after %s (#%d), which is final (uncommitted?)", key, e.Transition, e.Seq, prev.Transition, prev.Seq)
					}
				case prev.Transition == "failed" && e.Transition == "sent":
					// A late success over failed.
				case !retried && prev.Transition == e.Transition:
					say("%s: %s logged twice in a row (#%d, #%d) with no retry answered between them (repeated)", key, e.Transition, prev.Seq, e.Seq)
				case !retried:
					say("%s: %s (#%d) logged after %s (#%d) with no retry answered between them (uncommitted?)", key, e.Transition, e.Seq, prev.Transition, prev.Seq)
				}
			}
			switch e.Transition {
			case "sent":
				if delivered[key] == 0 {
					say("%s: sent logged (#%d), but the API never delivered it (uncommitted)", key, e.Seq)
				}
			case "canceled":
				if delivered[key] > 0 {
					say("%s: canceled logged (#%d), but the API delivered it (uncommitted)", key, e.Seq)
				}
				by := slices.Clone(cancels[key])
				if in != nil && in.Run != "" {
					for _, op := range m.runOpsOf(in) {
						if op.Kind == "cancel" && op.Result != outNo {
							by = append(by, op.Start)
						}
					}
				}
				if !slices.ContainsFunc(by, func(t time.Time) bool { return t.Before(e.At) }) {
					say("%s: canceled logged (#%d at %s), but no cancel of it or its run that may have committed began before (uncommitted)",
						key, e.Seq, e.At.Format("15:04:05.000"))
				}
			case "suppressed":
				if in != nil && !slices.ContainsFunc(in.allRecipients(), m.everSuppressed) {
					say("%s: suppressed logged (#%d), but none of its recipients %v was ever suppressed (uncommitted)", key, e.Seq, in.allRecipients())
				}
			}
		}

		// The delivery transitions in order.
		for i, e := range dels {
			if !slices.ContainsFunc(states, func(s sysStatusEntry) bool { return s.Transition == "sent" && s.Seq < e.Seq }) {
				say("%s: delivery transition %s (#%d) logged before any sent of it (uncommitted?)", key, e.Transition, e.Seq)
			}
			if !m.mayHaveEvent(e.MsgID, e.Transition) {
				say("%s: %s logged (#%d) for messages %q, but no event of theirs that may have been stored gives it (uncommitted)", key, e.Transition, e.Seq, e.MsgID)
			}
			if i == 0 {
				continue
			}
			prev := dels[i-1]
			switch {
			case prev.Transition == e.Transition && e.Transition == "bounced":
				if !m.mayHaveEvent(e.MsgID, "failed") && !m.mayHaveEvent(e.MsgID, "suppressed") {
					say("%s: bounced logged twice in a row (#%d, #%d), and no email.failed or email.suppressed event of its messages came between (repeated)",
						key, prev.Seq, e.Seq)
				}
			case prev.Transition == e.Transition:
				say("%s: %s logged twice in a row (#%d, #%d) (repeated)", key, e.Transition, prev.Seq, e.Seq)
			case statusRank[e.Transition] < statusRank[prev.Transition]:
				say("%s: %s (#%d) logged after %s (#%d), which outranks it (uncommitted?)", key, e.Transition, e.Seq, prev.Transition, prev.Seq)
			}
		}
	}
}

// mayHaveEvent says whether an event of one of the messages msgIDs
// (comma-separated) giving status may have been stored.
func (m *model) mayHaveEvent(msgIDs, status string) bool {
	for _, id := range strings.Split(msgIDs, ",") {
		for _, e := range m.byEmail[id] {
			if eventStatus[e.Type] == status && e.Stored != outNo {
				return true
			}
		}
	}
	return false
}

// statusLogCounts counts the log's transitions by kind, for the log.
func statusLogCounts(log []sysStatusEntry) string {
	c := map[string]int{}
	for _, e := range log {
		c[e.Transition]++
	}
	return fmt.Sprintf("%d transitions {%s}", len(log), fmtCounts(c))
}
