package demo

import (
	"strings"
	"testing"
)

func TestWrapFlagsKeepsValuesWithTheirFlags(t *testing.T) {
	lines := wrapFlags(workerArgs("127.0.0.1:40123"), 70)
	if strings.Join(lines, " ") != strings.Join(workerArgs("127.0.0.1:40123"), " ") {
		t.Fatalf("wrapFlags lost or reordered flags: %q", lines)
	}
	for _, l := range lines {
		if len(l) > 70 || !strings.HasPrefix(l, "--") {
			t.Errorf("line %q: longer than 70, or not starting with a flag", l)
		}
	}
}
