package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAPITransportKeepsAConnectionPerSend sends two rounds of as many
// requests at once as the worker's concurrency, over the transport work
// gives its API client: the second round must reuse the first round's
// connections, where each new one is a TCP (and, against the real API, a
// TLS) handshake.
func TestAPITransportKeepsAConnectionPerSend(t *testing.T) {
	t.Parallel()
	const concurrency = 300 // over the default transport's 100 idle connections
	var opened atomic.Int64
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Hold every request until the whole round is in flight, so that
		// the round needs a connection for each.
		arrived.Done()
		arrived.Wait()
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	hc := &http.Client{Transport: apiTransport(concurrency), Timeout: 30 * time.Second}
	round := func() int64 {
		before := opened.Load()
		arrived.Add(concurrency)
		var done sync.WaitGroup
		for range concurrency {
			done.Add(1)
			go func() {
				defer done.Done()
				resp, err := hc.Get(srv.URL)
				if err != nil {
					t.Error(err)
					arrived.Done() // the round must not wait for a request that failed
					return
				}
				resp.Body.Close()
			}()
		}
		done.Wait()
		return opened.Load() - before
	}
	if n := round(); n != concurrency {
		t.Fatalf("first round opened %d connections, want %d (one per request in flight)", n, concurrency)
	}
	if n := round(); n != 0 {
		t.Errorf("second round opened %d new connections, want 0: the transport closed idle connections it needed", n)
	}
}
