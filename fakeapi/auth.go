package fakeapi

import (
	"net/http"
	"slices"
	"strings"
)

// The two API key prefixes the API accepts; the mode is test iff oe_test_.
const (
	prefixTest = "oe_test_"
	prefixLive = "oe_live_"
)

// authenticate accepts "Authorization: Bearer oe_test_…" or "oe_live_…" (and,
// when Config.APIKeys is set, only those keys). OAuth access tokens and inbox
// tokens, which the real API also takes, are refused: the fake serves only
// API-key calls.
func (s *Server) authenticate(c *call) *apiError {
	header := c.r.Header.Get("Authorization")
	if header == "" {
		return unauthorized("missing_api_key",
			"No API key provided. Send Authorization: Bearer oe_test_… or oe_live_….")
	}
	scheme, credential, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return unauthorized("invalid_authorization_header",
			"The Authorization header must be Bearer followed by an API key.")
	}
	credential = strings.TrimSpace(credential)
	prefix := keyPrefix(credential)
	if prefix == "" || len(credential) == len(prefix) {
		return unauthorized("invalid_api_key",
			"The API key is malformed: it must start with oe_test_ or oe_live_.")
	}
	if len(s.cfg.APIKeys) > 0 && !slices.Contains(s.cfg.APIKeys, credential) {
		return unauthorized("invalid_api_key", "The API key is not valid.")
	}
	c.apiKey = credential
	s.mu.Lock()
	c.rec.KeyPrefix = prefix + "…"
	s.mu.Unlock()
	return nil
}

// keyPrefix is the mode prefix of an API key, or "" if it has none. Only the
// prefix is ever logged or recorded.
func keyPrefix(key string) string {
	for _, p := range []string{prefixTest, prefixLive} {
		if strings.HasPrefix(key, p) {
			return p
		}
	}
	return ""
}

func unauthorized(code, message string) *apiError {
	return newError(http.StatusUnauthorized, typeAuthentication, code, message)
}
