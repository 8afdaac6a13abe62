package demo

import (
	"errors"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

func TestReportCheckNamesEveryBrokenPromise(t *testing.T) {
	good := report{Committed: 36, RolledBack: 4, Sent: 36, Replayed: 2, Killed: true, Deliveries: 36,
		Bounced: 1, BouncedAddress: "charles@example.org", BounceListed: true, ReminderState: outbox.StateSuppressed,
		StatusHook: true, Emailed: store.DemoEmailed{Sent: 36, Replayed: 2, Once: 36, OnceReplayed: 2}}
	if err := good.check(); err != nil {
		t.Fatalf("a clean run: check = %v", err)
	}
	skipped := good
	skipped.StatusHook, skipped.StatusHookSkipped, skipped.Emailed = false, true, store.DemoEmailed{}
	if err := skipped.check(); err != nil {
		t.Fatalf("a clean run whose status hook was skipped (a function of your own): check = %v", err)
	}
	with := func(change func(r *report)) report {
		r := good
		change(&r)
		return r
	}
	for name, tc := range map[string]struct {
		r    report
		want string
	}{
		"duplicate": {
			with(func(r *report) { r.Deliveries, r.Duplicates = 37, 1 }),
			"1 emails were delivered more than once",
		},
		"rolled back reached the API": {
			with(func(r *report) { r.RolledBackReached = []string{"invoice:inv_x_0003"} }),
			"1 emails of rolled-back invoices reached the API",
		},
		"unsent": {
			with(func(r *report) { r.Sent, r.Unsent, r.Deliveries = 35, 1, 35 }),
			"1 committed intents were not sent",
		},
		"no bounce": {
			with(func(r *report) { r.Bounced = 0 }),
			"0 invoice emails bounced, want 1 (to charles@example.org)",
		},
		"bounced address not suppressed": {
			with(func(r *report) { r.BounceListed = false }),
			"the bounced address charles@example.org is not on the suppression list",
		},
		"reminder sent": {
			with(func(r *report) { r.ReminderState, r.ReminderCalls = outbox.StateSent, 1 }),
			`the next email to the bounced address reached the API 1 times; the next email to the bounced address ended "sent", not suppressed`,
		},
		"emailed_at missing on the replayed": {
			with(func(r *report) { r.Emailed.Once, r.Emailed.OnceReplayed = 34, 0 }),
			"emailed_at set once for 34 of 36 invoices sent (0 of 2 replayed)",
		},
		"emailed_at set twice": {
			with(func(r *report) { r.Emailed.Once, r.Emailed.OnceReplayed, r.Emailed.More = 35, 1, 1 }),
			"emailed_at set once for 35 of 36 invoices sent (1 of 2 replayed); 1 invoices have emailed_times above 1",
		},
		"emailed_at of an email not sent": {
			with(func(r *report) { r.Emailed.Unsent = 1 }),
			"1 invoices have emailed_at set for an email not sent",
		},
		"status hook not enabled": {
			with(func(r *report) { r.StatusHook = false }),
			"the status hook was not enabled",
		},
		"reminder failed": {
			with(func(r *report) { r.ReminderState = outbox.StateFailed }),
			`the next email to the bounced address ended "failed", not suppressed`,
		},
	} {
		err := tc.r.check()
		if !errors.Is(err, errInvariant) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: check = %v, want errInvariant saying %q", name, err, tc.want)
		}
	}
}

func TestExtraCountsBeyondTheFirst(t *testing.T) {
	n, names := extra(map[string]int{"a": 1, "b": 3, "c": 2})
	if n != 3 || len(names) != 2 || names[0] != "b (3 times)" || names[1] != "c (2 times)" {
		t.Errorf("extra = %d, %q; want 3, [b (3 times) c (2 times)]", n, names)
	}
}
