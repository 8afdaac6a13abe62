package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sendonce/sendonce/fakeapi"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestHelpDocumentsEveryKnob(t *testing.T) {
	var out bytes.Buffer
	cmd, _ := newCommand(env(nil), &out, &out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		if !strings.Contains(help, "--"+f.Name) {
			t.Errorf("--help does not mention --%s", f.Name)
		}
		if e, ok := envNames[f.Name]; !ok || !strings.Contains(help, e) {
			t.Errorf("--help does not name the environment variable of --%s", f.Name)
		}
	})
	for _, want := range []string{
		"error_before", "error_after", "drop_after", "latency=", "latency_after", "rate_limit", "retry_after",
		"times=", "p=", "to=", "key=", "path=", "method=", "status=", "date+5s",
		"X-Fake-Fault", "/_fake/deliveries", "/_fake/requests", "/_fake/faults", "/_fake/reset",
		"SIGTERM", "--fault 'drop_after:p=0.2'",
		"10/s", "600/m", "36000/h", "10/s,500/m", "rate_limit_error", "Retry-After",
		"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "rateLimited", "Exit status",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	vars := map[string]string{
		"OPENEMAIL_FAKE_SEED":       "5",
		"OPENEMAIL_FAKE_KEY_WINDOW": "2h",
		"OPENEMAIL_FAKE_FAULTS":     "drop_after:p=0.1,rate_limit",
		"OPENEMAIL_FAKE_API_KEYS":   "oe_test_a, oe_live_b",
		"OPENEMAIL_FAKE_MAX_BODY":   "1MiB",
		"OPENEMAIL_FAKE_LATENCY":    "20ms",
	}
	cmd, o := newCommand(env(vars), io.Discard, io.Discard)
	if err := cmd.ParseFlags([]string{"--seed", "7", "--fault", "error_before=502:times=1", "--fault", "latency_after=1s,drop_after", "--fault", "reject:to=bounced@"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(cmd, env(vars)); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config(nil)
	if err != nil {
		t.Fatal(err)
	}
	var faults []string
	for _, f := range cfg.Faults {
		faults = append(faults, f.String())
	}
	if cfg.Seed != 7 || cfg.KeyWindow != 2*time.Hour || cfg.MaxBodyBytes != 1<<20 ||
		strings.Join(cfg.APIKeys, " ") != "oe_test_a oe_live_b" ||
		strings.Join(faults, " ") != "error_before=502;times=1 latency_after=1s drop_after reject=recipient_rejected;to=bounced@ latency=20ms" {
		t.Fatalf("config %+v, faults %v", cfg, faults)
	}
}

func TestBadSettingsAreRefused(t *testing.T) {
	cases := []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"--fault", "explode"}, nil, "explode"},
		{[]string{"--fault", "reject=no-such-code"}, nil, "no-such-code"},
		{[]string{"--max-body", "10XB"}, nil, "10XB"},
		{nil, map[string]string{"OPENEMAIL_FAKE_SEED": "abc"}, "OPENEMAIL_FAKE_SEED"},
		{[]string{"--log-format", "xml"}, nil, "xml"},
		{[]string{"--addr", "256.0.0.1:1"}, nil, "listen"},
	}
	for _, tc := range cases {
		var out bytes.Buffer
		cmd, _ := newCommand(env(tc.vars), io.Discard, &out)
		cmd.SetArgs(tc.args)
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(out.String(), "Error:") {
			t.Errorf("%v %v: err = %v, stderr %q", tc.args, tc.vars, err, out.String())
		}
	}
}

func TestServesUntilCancelled(t *testing.T) {
	stdout, w := io.Pipe()
	cmd, _ := newCommand(env(map[string]string{"OPENEMAIL_FAKE_ADDR": "127.0.0.1:0"}), w, io.Discard)
	cmd.SetArgs([]string{"--seed", "11", "--fault", "error_before=418:method=GET:path=/emails"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^openemail-fake listening on (http://127\.0\.0\.1:\d+) \(seed 11\)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("start line %q", line)
	}
	resp := getEmails(t, m[1])
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("status %d, want the configured fault's 418", resp.StatusCode)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := http.Get(m[1] + "/_fake/health"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

func TestRateFlags(t *testing.T) {
	cases := []struct {
		args       []string
		vars       map[string]string
		rate       string
		retryAfter bool
		headers    bool
	}{
		{nil, nil, "", false, false},
		{[]string{"--rate", "10/s"}, nil, "10/s", false, false},
		{[]string{"--rate", "10/s,500/m", "--rate", "36000/h", "--rate-retry-after"}, nil, "10/s 500/m 36000/h", true, false},
		{[]string{"--rate", " 600/m ", "--rate-headers"}, map[string]string{"OPENEMAIL_FAKE_RATE": "1/h"}, "600/m", false, true},
		{nil, map[string]string{
			"OPENEMAIL_FAKE_RATE":             "5/m,1/s",
			"OPENEMAIL_FAKE_RATE_RETRY_AFTER": "true",
			"OPENEMAIL_FAKE_RATE_HEADERS":     "1",
		}, "5/m 1/s", true, true},
	}
	for _, tc := range cases {
		cfg, err := configFrom(t, tc.args, tc.vars)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.args, tc.vars, err)
		}
		var rate []string
		for _, l := range cfg.Rate {
			rate = append(rate, l.String())
		}
		if strings.Join(rate, " ") != tc.rate || cfg.RateRetryAfter != tc.retryAfter || cfg.RateHeaders != tc.headers {
			t.Errorf("%v %v: rate %v, retry-after %v, headers %v; want %q, %v, %v",
				tc.args, tc.vars, rate, cfg.RateRetryAfter, cfg.RateHeaders, tc.rate, tc.retryAfter, tc.headers)
		}
	}
}

func TestBadSettingsExitTwoWithOneLine(t *testing.T) {
	cases := []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"--rate", "0"}, nil, `invalid argument "0" for "--rate" flag: rate "0": no "/UNIT"`},
		{[]string{"--rate", "-1/s"}, nil, `rate "-1/s": count -1 is not positive`},
		{[]string{"--rate=10/fortnight"}, nil, `rate "10/fortnight": unit "fortnight" is not s, m or h`},
		{[]string{"--rate", "abc"}, nil, `rate "abc": no "/UNIT"`},
		{[]string{"--rate", "10/"}, nil, `rate "10/": no unit after the /`},
		{[]string{"--rate", ""}, nil, "rate is empty"},
		{[]string{"--rate", "10/s,,1/m"}, nil, "empty item between commas"},
		{nil, map[string]string{"OPENEMAIL_FAKE_RATE": "10/fortnight"}, `OPENEMAIL_FAKE_RATE="10/fortnight": rate "10/fortnight": unit "fortnight"`},
		{nil, map[string]string{"OPENEMAIL_FAKE_RATE_HEADERS": "maybe"}, "OPENEMAIL_FAKE_RATE_HEADERS"},
		{[]string{"--rate-retry-after"}, nil, "--rate-retry-after needs --rate"},
		{[]string{"--rate-headers"}, nil, "--rate-headers needs --rate"},
		{[]string{"--fault", "explode"}, nil, "explode"},
		{[]string{"--log-format", "xml"}, nil, "xml"},
		{[]string{"--no-such-flag"}, nil, "unknown flag"},
		{[]string{"extra"}, nil, "unknown command"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		code := execute(context.Background(), tc.args, env(tc.vars), &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.HasPrefix(lines[0], "Error: ") ||
			!strings.Contains(lines[0], tc.want) || stdout.Len() != 0 {
			t.Errorf("%q %v: exit %d, stderr %q, stdout %q; want exit 2 and one line with %q",
				tc.args, tc.vars, code, stderr.String(), stdout.String(), tc.want)
		}
	}

	// A good command line that cannot serve is a runtime failure, not a usage one.
	var stderr bytes.Buffer
	if code := execute(context.Background(), []string{"--addr", "256.0.0.1:1", "--log-level", "error"}, env(nil), io.Discard, &stderr); code != exitRuntime {
		t.Errorf("unusable address: exit %d, want %d; stderr %q", code, exitRuntime, stderr.String())
	}
}

func TestServesWithRate(t *testing.T) {
	url, stop := serve(t, []string{"--addr", "127.0.0.1:0", "--rate", "1/h", "--rate-retry-after", "--rate-headers"}, nil, io.Discard)
	defer stop()
	get := func() *http.Response { return getEmails(t, url) }
	fields := func(r *http.Response) string {
		return fmt.Sprintf("%d retry-after=%s limit=%s remaining=%s reset=%s", r.StatusCode, r.Header.Get("Retry-After"),
			r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"), r.Header.Get("RateLimit-Reset"))
	}
	if got := fields(get()); got != "200 retry-after= limit=1 remaining=0 reset=3600" {
		t.Errorf("first request: %s", got)
	}
	if got := fields(get()); got != "429 retry-after=3600 limit=1 remaining=0 reset=3600" {
		t.Errorf("second request: %s", got)
	}
	resp, err := http.Get(url + "/_fake/requests")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"rateLimited":1`) || !strings.Contains(string(body), `"rateLimited":true`) {
		t.Errorf("/_fake/requests %s", body)
	}

	if code := stop(); code != exitOK {
		t.Fatalf("exit %d after shutdown", code)
	}
}

// serve runs the command with args and the environment vars until stop,
// which returns its exit code (and may be called again). It returns the
// fake's URL from the start line.
func serve(t *testing.T, args []string, vars map[string]string, stderr io.Writer) (url string, stop func() int) {
	t.Helper()
	stdout, w := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- execute(ctx, args, env(vars), w, stderr) }()
	code, stopped := 0, false
	stop = func() int {
		if !stopped {
			cancel()
			code, stopped = <-done, true
		}
		return code
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		t.Fatal(err)
	}
	m := regexp.MustCompile(`listening on (http://\S+) `).FindStringSubmatch(line)
	if m == nil {
		stop()
		t.Fatalf("start line %q", line)
	}
	return m[1], stop
}

// getEmails lists emails at the fake on base with the test's API key.
func getEmails(t *testing.T, base string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/emails", nil)
	req.Header.Set("Authorization", "Bearer oe_test_cmd")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// configFrom parses the flags args with the environment vars, as the
// command does, and returns the fake's configuration or its error.
func configFrom(t *testing.T, args []string, vars map[string]string) (fakeapi.Config, error) {
	t.Helper()
	cmd, o := newCommand(env(vars), io.Discard, io.Discard)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := applyEnv(cmd, env(vars)); err != nil {
		t.Fatalf("%v %v: %v", args, vars, err)
	}
	return o.config(nil)
}
