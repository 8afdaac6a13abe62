package client

import (
	"errors"
	"strings"
	"testing"
)

// Rule 6 (environment): options win over OPENEMAIL_API_KEY and
// OPENEMAIL_BASE_URL, empty variables count as unset, no key is an error, and
// a malformed key is refused without being repeated.
// Not parallel: t.Setenv.
func TestNewCredentialsAndEnv(t *testing.T) {
	const envKey = "oe_live_from-env-5ecret"
	tests := []struct {
		name     string
		env      map[string]string
		opts     []Option
		wantErr  error
		wantKey  string
		wantBase string
	}{
		{"no credential anywhere", nil, nil, ErrNoCredential, "", ""},
		{"empty env key is unset", map[string]string{EnvAPIKey: ""}, nil, ErrNoCredential, "", ""},
		{"env key", map[string]string{EnvAPIKey: envKey}, nil, nil, envKey, DefaultBaseURL},
		{"option beats env", map[string]string{EnvAPIKey: envKey}, []Option{WithAPIKey(testAPIKey)}, nil, testAPIKey, DefaultBaseURL},
		{"empty option is an error, not a fallback", map[string]string{EnvAPIKey: envKey}, []Option{WithAPIKey("")}, ErrInvalidAPIKey, "", ""},
		{"test key", nil, []Option{WithAPIKey("oe_test_abc")}, nil, "oe_test_abc", DefaultBaseURL},
		{"bad prefix", nil, []Option{WithAPIKey("sk_live_5ecretvalue")}, ErrInvalidAPIKey, "", ""},
		{"bad env prefix", map[string]string{EnvAPIKey: "oe_prod_5ecretvalue"}, nil, ErrInvalidAPIKey, "", ""},
		{"prefix only", nil, []Option{WithAPIKey("oe_live_")}, ErrInvalidAPIKey, "", ""},
		{"whitespace in key", nil, []Option{WithAPIKey("oe_live_5ecret value")}, ErrInvalidAPIKey, "", ""},
		{"env base", map[string]string{EnvAPIKey: envKey, EnvBaseURL: "localhost:2222"}, nil, nil, envKey, "http://localhost:2222"},
		{"empty env base is unset", map[string]string{EnvAPIKey: envKey, EnvBaseURL: ""}, nil, nil, envKey, DefaultBaseURL},
		{"option base beats env", map[string]string{EnvAPIKey: envKey, EnvBaseURL: "http://127.0.0.1:1"}, []Option{WithBaseURL("https://eu.example.com/")}, nil, envKey, "https://eu.example.com"},
		{"bad env base", map[string]string{EnvAPIKey: envKey, EnvBaseURL: "http://u:p@x"}, nil, ErrInvalidBaseURL, "", ""},
		{"empty option base", nil, []Option{WithAPIKey(testAPIKey), WithBaseURL(" ")}, ErrInvalidBaseURL, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvAPIKey, "")
			t.Setenv(EnvBaseURL, "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := New(tt.opts...)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				for _, secretPart := range []string{"5ecret", envKey} {
					if strings.Contains(err.Error(), secretPart) {
						t.Errorf("error %q repeats the key", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.cfg.apiKey.reveal() != tt.wantKey || c.BaseURL() != tt.wantBase {
				t.Errorf("key, base = %s, %s; want (key), %s", c.cfg.apiKey, c.BaseURL(), tt.wantBase)
			}
		})
	}
}
