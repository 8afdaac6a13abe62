package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

const cmdSecret = "whsec_cmd_9c2d"

func TestWebhookFlags(t *testing.T) {
	cases := []struct {
		args         []string
		vars         map[string]string
		url, secret  string
		faults       string
		wantErrorHas string
	}{
		{args: nil},
		{args: []string{"--webhook-url", "http://127.0.0.1:9/hooks", "--webhook-secret", cmdSecret},
			url: "http://127.0.0.1:9/hooks", secret: cmdSecret},
		{vars: map[string]string{"OPENEMAIL_FAKE_WEBHOOK_URL": "https://app.test/wh", "OPENEMAIL_WEBHOOK_SECRET": cmdSecret},
			url: "https://app.test/wh", secret: cmdSecret},
		{args: []string{"--webhook-url", "http://a.test/1", "--webhook-secret", "flag-wins",
			"--fault", "bounce:to=bounced@", "--fault", "webhook_duplicate:p=0.1,webhook_out_of_order=2,webhook_delay=1s:to=slow@",
			"--fault", "webhook_bad_signature:times=1,webhook_stale:key=k:,complain,delay_then_bounce"},
			vars: map[string]string{"OPENEMAIL_FAKE_WEBHOOK_URL": "http://b.test/2", "OPENEMAIL_WEBHOOK_SECRET": cmdSecret},
			url:  "http://a.test/1", secret: "flag-wins",
			faults: "bounce;to=bounced@ webhook_duplicate;p=0.1 webhook_out_of_order=2 webhook_delay=1s;to=slow@ " +
				"webhook_bad_signature;times=1 webhook_stale;key=k: complain delay_then_bounce"},
		// A secret alone is fine: the receiving side may read the same variable.
		{vars: map[string]string{"OPENEMAIL_WEBHOOK_SECRET": cmdSecret}, secret: cmdSecret},
		{args: []string{"--webhook-url", "http://a.test/1"}, wantErrorHas: "needs a webhook secret"},
		{args: []string{"--webhook-url", "a.test/1", "--webhook-secret", cmdSecret}, wantErrorHas: "absolute http or https URL"},
	}
	for _, tc := range cases {
		cfg, err := configFrom(t, tc.args, tc.vars)
		if tc.wantErrorHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrorHas) || strings.Contains(err.Error(), cmdSecret) {
				t.Errorf("%v: err %v, want one with %q", tc.args, err, tc.wantErrorHas)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v %v: %v", tc.args, tc.vars, err)
		}
		var faults []string
		for _, f := range cfg.Faults {
			faults = append(faults, f.String())
		}
		if cfg.WebhookURL != tc.url || cfg.WebhookSecret != tc.secret || strings.Join(faults, " ") != tc.faults {
			t.Errorf("%v %v: url %q secret %q faults %v; want %q %q %q",
				tc.args, tc.vars, cfg.WebhookURL, cfg.WebhookSecret, faults, tc.url, tc.secret, tc.faults)
		}
	}

	var help bytes.Buffer
	cmd, _ := newCommand(env(map[string]string{"OPENEMAIL_WEBHOOK_SECRET": cmdSecret}), &help, &help)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--webhook-url", "--webhook-secret", "OPENEMAIL_WEBHOOK_SECRET", "OPENEMAIL_FAKE_WEBHOOK_URL",
		"bounce", "complain", "delay_then_bounce", "webhook_duplicate", "webhook_out_of_order", "webhook_delay=",
		"webhook_bad_signature", "webhook_stale", "X-OpenEmail-Signature", "X-OpenEmail-Delivery", "X-OpenEmail-Event",
		"email.delivered", "/_fake/webhooks"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
	if strings.Contains(help.String(), cmdSecret) {
		t.Error("--help shows the secret")
	}
}

func TestServesWebhooks(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	var bodies [][]byte
	arrived := make(chan struct{}, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r.Header.Clone()), append(bodies, b)
		mu.Unlock()
		select {
		case arrived <- struct{}{}:
		default:
		}
	}))
	defer recv.Close()

	var stderr syncbuf.Buffer
	url, stop := serve(t, []string{"--addr", "127.0.0.1:0", "--webhook-url", recv.URL, "--log-level", "debug"},
		map[string]string{"OPENEMAIL_WEBHOOK_SECRET": cmdSecret}, &stderr)
	defer stop()
	req, _ := http.NewRequest(http.MethodPost, url+"/emails",
		strings.NewReader(`{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}`))
	req.Header.Set("Authorization", "Bearer oe_test_cmd")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("send: %d", resp.StatusCode)
	}
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("no webhook received")
	}
	mu.Lock()
	sig, body := got[0].Get("X-OpenEmail-Signature"), bodies[0]
	mu.Unlock()
	ts := regexp.MustCompile(`^t=(\d+),`).FindStringSubmatch(sig)
	if ts == nil {
		t.Fatalf("signature %q", sig)
	}
	tsec, _ := strconv.ParseInt(ts[1], 10, 64)
	if want := fakeapi.SignWebhook(cmdSecret, tsec, body); sig != want {
		t.Errorf("signature %q, want %q", sig, want)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(stderr.String(), cmdSecret) || !strings.Contains(stderr.String(), "webhook") {
		t.Errorf("stderr shows the secret or no webhook line: %s", stderr.String())
	}
}
