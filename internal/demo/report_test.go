package demo

import (
	"errors"
	"strings"
	"testing"
)

func TestReportCheckNamesEveryBrokenPromise(t *testing.T) {
	good := report{Committed: 36, RolledBack: 4, Sent: 36, Replayed: 2, Killed: true, Deliveries: 36}
	if err := good.check(); err != nil {
		t.Fatalf("a clean run: check = %v", err)
	}
	for name, tc := range map[string]struct {
		r    report
		want string
	}{
		"duplicate": {
			report{Committed: 36, Sent: 36, Deliveries: 37, Duplicates: 1},
			"1 emails were delivered more than once",
		},
		"rolled back reached the API": {
			report{Committed: 36, Sent: 36, Deliveries: 36, RolledBackReached: []string{"invoice:inv_x_0003"}},
			"1 emails of rolled-back invoices reached the API",
		},
		"unsent": {
			report{Committed: 36, Sent: 35, Unsent: 1, Deliveries: 35},
			"1 committed intents were not sent",
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
