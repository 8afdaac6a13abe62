package client

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// contractTableFile is a verbatim copy of the contract's §2 rows.
const contractTableFile = "testdata/retry-contract-table.md"

// parseContractTable reads the contract's call lists: each table row's
// first column (split on commas, footnote marks dropped) with its verdict,
// and the calls named in the "Newer calls" paragraph, which are retried.
func parseContractTable(t *testing.T, text string) map[string]bool {
	t.Helper()
	calls := map[string]bool{}
	add := func(name string, verdict bool) {
		if prev, dup := calls[name]; dup && prev != verdict {
			t.Fatalf("contract names %s twice with different verdicts", name)
		}
		calls[name] = verdict
	}
	footnotes := strings.NewReplacer("¹", "", "²", "", "³", "", "⁴", "", "⁵", "")
	callName := regexp.MustCompile(`^[a-z_]+\.[a-z_]+$`)

	sc := bufio.NewScanner(strings.NewReader(text))
	inNewer := false
	var newer strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "| "):
			cols := strings.Split(strings.Trim(line, "| "), " | ")
			if len(cols) != 3 || cols[0] == "calls" {
				continue
			}
			first := footnotes.Replace(cols[0])
			if strings.HasPrefix(first, "every ") { // "every read (GET)", "every other call…"
				continue
			}
			var verdict bool
			switch cols[1] {
			case "yes":
				verdict = true
			case "**no**":
				verdict = false
			default:
				t.Fatalf("row %q: verdict %q is neither yes nor **no**", line, cols[1])
			}
			for _, name := range strings.Split(first, ",") {
				name = strings.TrimSpace(name)
				if !callName.MatchString(name) {
					t.Fatalf("row %q: %q is not a call name", line, name)
				}
				add(name, verdict)
			}
		case strings.HasPrefix(line, "Newer calls:"):
			inNewer = true
			newer.WriteString(line + " ")
		case inNewer && strings.TrimSpace(line) == "":
			inNewer = false
		case inNewer:
			newer.WriteString(line + " ")
		}
	}
	if newer.Len() == 0 {
		t.Fatal("no \"Newer calls\" paragraph found")
	}
	for _, name := range regexp.MustCompile(`\b[a-z_]+\.[a-z_]+\b`).FindAllString(newer.String(), -1) {
		add(name, true)
	}
	return calls
}

// Rule 3: every write this package makes is classified as the contract's
// table says, and the table is parsed for real (it names well over 100 calls).
func TestRepeatableCallsMatchContract(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(contractTableFile)
	if err != nil {
		t.Fatal(err)
	}
	contract := parseContractTable(t, string(data))
	if len(contract) < 100 {
		t.Fatalf("parsed only %d calls from %s; the parser is broken", len(contract), contractTableFile)
	}
	for name, got := range repeatableCalls {
		want, named := contract[name]
		if !named {
			t.Errorf("%s: in repeatableCalls but not named by the contract", name)
		} else if got != want {
			t.Errorf("%s: repeatableCalls says %v, contract says %v", name, got, want)
		}
	}
}

// The testdata copy must stay a verbatim copy of the shared contract, when the
// shared contract is at hand (it lives outside this module).
func TestContractTableCopyIsCurrent(t *testing.T) {
	t.Parallel()
	shared, err := os.ReadFile("../../shared/retry-contract.md")
	if err != nil {
		t.Skip("shared contract not available:", err)
	}
	copyText, err := os.ReadFile(contractTableFile)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(copyText)) {
		if strings.HasPrefix(line, "<!--") || strings.HasPrefix(line, "     ") || strings.TrimSpace(line) == "" {
			continue
		}
		if !strings.Contains(string(shared), line) {
			t.Errorf("testdata line not in the shared contract: %q", line)
		}
	}
	a, b := parseContractTable(t, string(shared)), parseContractTable(t, string(copyText))
	if len(a) != len(b) {
		t.Errorf("shared contract names %d calls, testdata copy %d", len(a), len(b))
	}
}

// Rule 3: only repeatable calls are retried. The API answers 503 forever;
// a repeatable call makes 1+maxRetries attempts, any other call one.
func TestOnlyRepeatableCallsRetried(t *testing.T) {
	t.Parallel()
	doRaw := func(method string, opts ...RequestOption) call {
		return func(ctx context.Context, c *Client) error {
			var body any
			if method != "GET" {
				body = map[string]string{"k": "v"}
			}
			return c.Do(ctx, method, "/things/t_1", body, nil, opts...)
		}
	}
	tests := []attemptsCase{
		{"emails.get", func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em_1"); return err }, 3},
		{"emails.list", func(ctx context.Context, c *Client) error { _, err := c.Emails.List(ctx, nil); return err }, 3},
		{"emails.cancel", func(ctx context.Context, c *Client) error { _, err := c.Emails.Cancel(ctx, "em_1"); return err }, 3},
		{"emails.reschedule", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.Reschedule(ctx, "em_1", testNow.Add(3600e9))
			return err
		}, 3},
		{"broadcasts.get", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Get(ctx, "br_1"); return err }, 3},
		{"broadcasts.cancel", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Cancel(ctx, "br_1"); return err }, 3},
		{"raw GET", doRaw("GET"), 3},
		{"raw POST", doRaw("POST"), 1},
		{"raw PUT", doRaw("PUT"), 1},
		{"raw DELETE", doRaw("DELETE"), 1},
		{"raw PATCH", doRaw("PATCH"), 1},
		{"raw POST with key only", doRaw("POST", WithIdempotencyKey("k:1")), 1},
		{"raw POST Repeatable", doRaw("POST", Repeatable()), 3},
		{"raw DELETE Repeatable", doRaw("DELETE", Repeatable()), 3},
	}
	for _, sc := range sendCalls {
		tests = append(tests, attemptsCase{sc.name, func(ctx context.Context, c *Client) error { return sc.run(ctx, c) }, 3})
	}
	testAttempts(t, unavailable, nil, tests, func(t *testing.T, _ attemptsCase, err error, _ int) {
		if !isStatus(err, 503) {
			t.Fatalf("err = %v, want the 503", err)
		}
	})
}
