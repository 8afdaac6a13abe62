package fakeapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestRacingRequestWaitsForClaimedKey holds the first send between claiming
// its key and delivering, and shows a second request with the same key waits
// for it and then replays rather than sending.
func TestRacingRequestWaitsForClaimedKey(t *testing.T) {
	t.Parallel()
	s, url, claimed, release, waiting := holdingServer(t)
	send := func() <-chan map[string]any {
		out := make(chan map[string]any, 1)
		go func() {
			body := `{"from":"shop@example.com","to":["ann@example.com"],"text":"hi"}`
			req, _ := http.NewRequest(http.MethodPost, url+"/emails", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer oe_test_x")
			req.Header.Set("Idempotency-Key", "race")
			var answer map[string]any
			if resp, err := http.DefaultClient.Do(req); err == nil {
				json.NewDecoder(resp.Body).Decode(&answer)
				resp.Body.Close()
			}
			out <- answer
		}()
		return out
	}

	first := send()
	<-claimed
	second := send()
	<-waiting
	if n := len(s.Deliveries()); n != 0 {
		t.Fatalf("%d deliveries while the first send holds its claim", n)
	}
	close(release)
	a, b := <-first, <-second
	if a["replayed"] != false || b["replayed"] != true || a["id"] == nil || a["id"] != b["id"] {
		t.Fatalf("first %v, second %v", a, b)
	}
	if n := len(s.Deliveries()); n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
}

// TestRejectedSendReleasesKeyToWaiter holds a send that a reject rule will
// refuse between claiming its key and handling it; a second request with the
// same key waits, and when the first is refused (storing nothing) it claims
// the free key and sends.
func TestRejectedSendReleasesKeyToWaiter(t *testing.T) {
	t.Parallel()
	s, url, claimed, release, waiting := holdingServer(t)
	type answer struct {
		status int
		body   map[string]any
	}
	send := func() <-chan answer {
		out := make(chan answer, 1)
		go func() {
			body := `{"from":"shop@example.com","to":["ann@example.com"],"text":"hi"}`
			req, _ := http.NewRequest(http.MethodPost, url+"/emails", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer oe_test_x")
			req.Header.Set("Idempotency-Key", "race")
			req.Header.Set(headerFault, "reject;times=1")
			var a answer
			if resp, err := http.DefaultClient.Do(req); err == nil {
				a.status = resp.StatusCode
				json.NewDecoder(resp.Body).Decode(&a.body)
				resp.Body.Close()
			}
			out <- a
		}()
		return out
	}

	first := send()
	<-claimed
	second := send()
	<-waiting
	close(release)
	a, b := <-first, <-second
	if a.status != http.StatusUnprocessableEntity || b.status != http.StatusOK || b.body["replayed"] != false {
		t.Fatalf("first %d %v, second %d %v", a.status, a.body, b.status, b.body)
	}
	if n := len(s.Deliveries()); n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
}

// holdingServer starts a server whose first send holds between claiming
// its key and handling it until release is closed; claimed closes when it
// holds, and waiting when a second request waits for the key.
func holdingServer(t *testing.T) (s *Server, url string, claimed, release, waiting chan struct{}) {
	t.Helper()
	s = New(Config{})
	t.Cleanup(s.Close)
	claimed, release, waiting = make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holdFirst, signalWait sync.Once
	s.testHook = func(event string) {
		switch event {
		case "claimed":
			holdFirst.Do(func() { close(claimed); <-release })
		case "waiting":
			signalWait.Do(func() { close(waiting) })
		}
	}
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return s, url, claimed, release, waiting
}
