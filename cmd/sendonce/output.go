package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// printJSONArray writes rows as a JSON array: empty, never null, when
// there are none.
func printJSONArray[T any](w io.Writer, rows []T) error {
	if rows == nil {
		rows = []T{}
	}
	return printJSON(w, rows)
}

// printList writes the rows of a list command: as a JSON array with
// asJSON, otherwise as a table under header (tab-separated columns), one
// line(row) a row.
func printList[T any](w io.Writer, asJSON bool, rows []T, header string, line func(T) string) error {
	if asJSON {
		return printJSONArray(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	return tw.Flush()
}

// summary is an intent on one line: key, id, kind and state, and what
// happened to it.
func summary(r *outbox.Record) string {
	if r.PrunedAt != nil {
		return fmt.Sprintf("%s (kind %s, state %s, pruned %s: only its key's tombstone is kept)", r.Key, r.Kind, r.State, stamp(*r.PrunedAt))
	}
	s := fmt.Sprintf("%s (id %d, kind %s, state %s", r.Key, r.ID, r.Kind, r.State)
	if r.SendAt != nil && r.State == outbox.StatePending {
		s += ", send at " + stamp(*r.SendAt)
	}
	if r.MessageID != "" {
		s += ", message " + r.MessageID
	}
	if r.Replayed {
		s += ", replayed"
	}
	if r.Tenant != "" {
		s += ", tenant " + r.Tenant
	}
	return s + ")"
}

// printRecord writes an intent field by field. The payload (the message
// itself) is left to --json.
func printRecord(w io.Writer, r *outbox.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("key", r.Key)
	if r.PrunedAt != nil {
		row("state", string(r.State))
		row("pruned", stamp(*r.PrunedAt)+" (retention: only the key's tombstone is kept)")
		tw.Flush()
		return
	}
	row("id", fmt.Sprint(r.ID))
	row("kind", string(r.Kind))
	row("template", r.TemplateID)
	row("tenant", r.Tenant)
	row("state", string(r.State))
	row("attempts", fmt.Sprint(r.Attempts))
	if r.Uncertain && r.State != outbox.StateSent {
		row("uncertain", "true (an attempt may have reached the API)")
	}
	if r.Snoozes > 0 {
		row("snoozes", fmt.Sprint(r.Snoozes))
	}
	row("api key", r.APIKeyFingerprint)
	row("message id", r.MessageID)
	row("batch", r.BatchKey)
	if r.State == outbox.StateSent {
		row("replayed", fmt.Sprint(r.Replayed))
	}
	row("last error", r.LastError)
	row("suppressed", strings.Join(r.SuppressedRecipients, ", "))
	if r.DeliveryStatus != "" {
		row("delivery", string(r.DeliveryStatus)+" ("+stamp(*r.DeliveryStatusAt)+")")
	} else if r.State == outbox.StateSent {
		row("delivery", "unknown (no delivery event yet)")
	}
	if r.SendAt != nil {
		row("send at", stamp(*r.SendAt))
	}
	if r.JobID != nil {
		row("river job", fmt.Sprint(*r.JobID))
	}
	row("traceparent", r.TraceParent) // the enqueuer's span, which the send span links to
	row("created", stamp(r.CreatedAt))
	if r.FirstAttemptAt != nil {
		row("first attempt", stamp(*r.FirstAttemptAt))
	}
	if r.ForcedRetryAt != nil {
		row("forced retry", stamp(*r.ForcedRetryAt))
	}
	row("updated", stamp(r.UpdatedAt))
	if r.SentAt != nil {
		row("sent", stamp(*r.SentAt))
	}
	row("payload", fmt.Sprintf("%d bytes (see --json)", len(r.Payload)))
	tw.Flush()
}

// printTable writes intents one per line.
func printTable(w io.Writer, recs []*outbox.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tKIND\tSTATE\tATTEMPTS\tDELIVERY\tUPDATED\tLAST ERROR")
	for _, r := range recs {
		delivery := string(r.DeliveryStatus)
		if delivery == "" {
			delivery = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Key, r.Kind, r.State, r.Attempts,
			delivery, stamp(r.UpdatedAt), clip(r.LastError, 60))
	}
	tw.Flush()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
