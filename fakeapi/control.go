package fakeapi

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
)

// serveControl answers the /_fake/ endpoints that let a test (or a person)
// inspect and steer a fake running in another process. They need no API key,
// are never faulted, and are not recorded in the request log.
//
//	GET  /_fake/deliveries[?to=addr]  the delivery ledger: {"data":[Delivery…]}
//	GET  /_fake/requests              the request log: {"data":[RequestRecord…],"rateLimited":n}
//	GET  /_fake/webhooks              webhook attempts: {"data":[WebhookAttempt…],"sent":n}
//	POST /_fake/reset                 clear all state, restore the configured faults and the seed
//	GET  /_fake/faults                {"faults":["rule",…],"seed":n}
//	POST /_fake/faults                replace the rules: {"faults":["rule",…]}, optionally "seed":n
//	GET  /_fake/health                {"ok":true}
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request, requestID string) {
	answer := func(status int, v any) {
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(b)
	}
	fail := func(e *apiError) { answer(e.status, json.RawMessage(e.body(requestID))) }
	only := func(method string) bool {
		if r.Method == method {
			return true
		}
		w.Header().Set("Allow", method)
		fail(newError(http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed",
			r.Method+" is not allowed on "+r.URL.Path+"."))
		return false
	}

	switch r.URL.Path {
	case "/_fake/deliveries":
		if !only(http.MethodGet) {
			return
		}
		var data []Delivery
		if to := r.URL.Query().Get("to"); to != "" {
			data = s.DeliveriesTo(to)
		} else {
			data = s.Deliveries()
		}
		answer(http.StatusOK, map[string]any{"data": nonNil(data)})
	case "/_fake/requests":
		if only(http.MethodGet) {
			answer(http.StatusOK, map[string]any{"data": nonNil(s.Requests()), "rateLimited": s.RateLimited()})
		}
	case "/_fake/webhooks":
		if only(http.MethodGet) {
			answer(http.StatusOK, map[string]any{"data": nonNil(s.Webhooks()), "sent": s.WebhooksSent()})
		}
	case "/_fake/reset":
		if only(http.MethodPost) {
			s.Reset()
			answer(http.StatusOK, map[string]any{"ok": true})
		}
	case "/_fake/faults":
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost:
			if e := s.replaceFaults(w, r); e != nil {
				fail(e)
				return
			}
		default:
			w.Header().Set("Allow", "GET, POST")
			fail(newError(http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed",
				r.Method+" is not allowed on "+r.URL.Path+"."))
			return
		}
		answer(http.StatusOK, map[string]any{"faults": nonNil(s.Faults()), "seed": s.Seed()})
	case "/_fake/health":
		if only(http.MethodGet) {
			answer(http.StatusOK, map[string]any{"ok": true})
		}
	default:
		fail(notFound("No control endpoint " + r.URL.Path + " (see GET /_fake/deliveries, /_fake/requests, /_fake/webhooks, /_fake/faults, POST /_fake/reset)."))
	}
}

// replaceFaults reads {"faults":[rule text…], "seed": n} and applies it.
func (s *Server) replaceFaults(w http.ResponseWriter, r *http.Request) *apiError {
	var req struct {
		Faults []Fault `json:"faults"`
		Seed   *int64  `json:"seed"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return invalidRequest("invalid_fault", "Expected {\"faults\":[\"rule\",…],\"seed\":n}: "+
			strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := s.SetFaults(req.Faults...); err != nil {
		return invalidRequest("invalid_fault", err.Error())
	}
	if req.Seed != nil {
		s.mu.Lock()
		s.seed = *req.Seed
		s.rng = rand.New(rand.NewPCG(uint64(s.seed), 0))
		s.mu.Unlock()
		s.logger.Info("seed changed", "seed", *req.Seed)
	}
	return nil
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
