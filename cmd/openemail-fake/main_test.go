package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
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
	if err := cmd.ParseFlags([]string{"--seed", "7", "--fault", "error_before=502:times=1", "--fault", "latency_after=1s,drop_after"}); err != nil {
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
		strings.Join(faults, " ") != "error_before=502;times=1 latency_after=1s drop_after latency=20ms" {
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
	req, _ := http.NewRequest(http.MethodGet, m[1]+"/emails", nil)
	req.Header.Set("Authorization", "Bearer oe_test_cmd")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
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
