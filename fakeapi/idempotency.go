package fakeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"
)

// maxKeyLength is the longest Idempotency-Key the API accepts.
const maxKeyLength = 255

// validKey reports whether k is 1 to 255 characters of letters, digits,
// '_', '.', ':' and '-', the API's rule.
func validKey(k string) bool {
	if len(k) < 1 || len(k) > maxKeyLength {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// keyScope is where a key lives: keys are scoped per API key, so two
// accounts using the same key never see each other's sends.
type keyScope struct {
	apiKey string
	key    string
}

// keyEntry is one claimed key. It is pending from the claim until the send
// is done (done closed, complete true); racing requests with the same key
// wait on done and then replay result.
type keyEntry struct {
	fingerprint string
	claimedAt   time.Time
	done        chan struct{}
	complete    bool
	result      sendResult
}

// sendResult is what a send created, enough to render its answer again in
// the resources' current state.
type sendResult struct {
	kind  Kind
	items []sendItem // one per message asked for, in request order
}

// sendItem is one message a send asked for: the id of the message it made,
// or, for a batch email a reject fault refused, the refusal (and the email's
// to, echoed in the answer). A refused email makes no message.
type sendItem struct {
	id      string
	to      []string
	refused *apiError
}

// canonical renders a decoded body with sorted keys and no insignificant
// whitespace; numbers keep their literal text.
func canonical(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// fingerprint identifies a request for key reuse: method, path and the
// canonical body. The same key on another endpoint is a reuse too.
func fingerprint(method, escapedPath string, body map[string]any) string {
	sum := sha256.Sum256(canonical(body))
	return method + " " + escapedPath + " " + hex.EncodeToString(sum[:])
}

// claimKey claims the call's key for a request with fingerprint fp, or finds
// why it cannot:
//   - the key is free (or expired): if invalid is set the request is refused
//     with it and nothing is stored; otherwise the key is claimed and the
//     pending entry returned, for completeKeyLocked once the send is done;
//   - the key holds another request: 422 idempotency_key_reuse;
//   - the key holds this request, done: the answer to replay, rendered now
//     in the resources' current state;
//   - the key holds this request, in progress: wait for it, then look again.
//
// abandoned is true when the client left or the server closed while waiting.
func (s *Server) claimKey(c *call, fp string, invalid *apiError) (claimed *keyEntry, replay any, abandoned bool, err *apiError) {
	scope := keyScope{apiKey: c.apiKey, key: c.idemKey}
	for {
		s.mu.Lock()
		now := s.now()
		s.promoteDueLocked(now)
		s.sweepKeysLocked(now)
		e := s.keys[scope]
		if e != nil && e.complete && s.keyExpired(e, now) {
			delete(s.keys, scope)
			e = nil
		}
		switch {
		case e == nil && invalid != nil:
			s.mu.Unlock()
			return nil, nil, false, invalid
		case e == nil:
			e = &keyEntry{fingerprint: fp, claimedAt: now, done: make(chan struct{})}
			s.keys[scope] = e
			s.mu.Unlock()
			return e, nil, false, nil
		case e.fingerprint != fp:
			s.mu.Unlock()
			return nil, nil, false, keyReused()
		case e.complete:
			view := s.sendViewLocked(e.result, true)
			s.mu.Unlock()
			return nil, view, false, nil
		}
		done := e.done
		s.mu.Unlock()
		if s.testHook != nil {
			s.testHook("waiting")
		}
		select {
		case <-done:
		case <-c.r.Context().Done():
			return nil, nil, true, nil
		case <-s.closed:
			return nil, nil, true, nil
		}
	}
}

// completeKeyLocked stores what the claimed send created and releases the
// requests waiting on it.
func (s *Server) completeKeyLocked(e *keyEntry, result sendResult) {
	e.result = result
	e.complete = true
	close(e.done)
}

// releaseKeyLocked gives up a claim whose send stored nothing (a single
// send a reject fault refused): the key is free again, and requests waiting
// on it look again, as if the claim had never been made.
func (s *Server) releaseKeyLocked(c *call, e *keyEntry) {
	scope := keyScope{apiKey: c.apiKey, key: c.idemKey}
	if s.keys[scope] == e {
		delete(s.keys, scope)
	}
	close(e.done)
}

func (s *Server) keyExpired(e *keyEntry, now time.Time) bool {
	return now.Sub(e.claimedAt) >= s.cfg.KeyWindow
}

// sweepKeysLocked forgets expired keys, at most once a minute of fake time,
// so a long-running fake does not grow without bound.
func (s *Server) sweepKeysLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = now
	for scope, e := range s.keys {
		if e.complete && s.keyExpired(e, now) {
			delete(s.keys, scope)
		}
	}
}

func invalidKey() *apiError {
	return invalidRequest("invalid_idempotency_key",
		"The Idempotency-Key must be 1 to 255 characters of letters, digits, '_', '.', ':' and '-'.")
}

func keyReused() *apiError {
	return newError(http.StatusUnprocessableEntity, typeValidation, "idempotency_key_reuse",
		"This Idempotency-Key was already used with a different request body or endpoint; use a new key for a new send.")
}
