package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// TestConfigDefaults: a zero Config gets the documented defaults, without
// a database (New only wires what withDefaults and validate settle).
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := (&Config{}).withDefaults()
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"Queue", c.Queue, outbox.DefaultQueue},
		{"Concurrency", c.Concurrency, DefaultConcurrency},
		{"JobTimeout", c.JobTimeout, DefaultJobTimeout},
		{"RescueAfter", c.RescueAfter, DefaultJobTimeout + time.Minute},
		{"FetchCooldown", c.FetchCooldown, DefaultFetchCooldown},
		{"SweepInterval", c.SweepInterval, DefaultSweepInterval},
		{"Lease", c.Lease, DefaultLease},
		{"CoalesceWait", c.CoalesceWait, DefaultCoalesceWait},
		{"RetainKeys", c.RetainKeys, DefaultRetainKeys},
		{"PruneInterval", c.PruneInterval, DefaultPruneInterval},
		{"Send.Logger is Logger", c.Send.Logger == c.Logger, true},
		{"TracerProvider set", c.TracerProvider != nil, true},
	} {
		if tt.got != tt.want {
			t.Errorf("Config{}.withDefaults().%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if err := c.validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	if k := (&Config{RetainKeys: KeepKeysForever}).withDefaults().RetainKeys; k != KeepKeysForever {
		t.Errorf("RetainKeys KeepKeysForever became %s", k)
	}
}

// TestConfigValidate: each setting New cannot honour is refused with a line
// naming it.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{JobTimeout: time.Minute, RescueAfter: time.Minute}, "rescue-after (1m0s) must exceed job-timeout (1m0s)"},
		{Config{Send: SendConfig{MaxAttempts: MaxAttempts + 1}}, "max attempts 100: want at most 99"},
		{Config{Send: SendConfig{ReplayWindow: 25 * time.Hour}}, "replay window 25h0m0s: want at most 24h0m0s"},
		{Config{Send: SendConfig{PartlySuppressed: "drop"}}, `partly suppressed "drop"`},
		{Config{Send: SendConfig{MaxPause: -time.Second}}, "max pause -1s"},
		{Config{Lease: 100 * time.Millisecond}, "lease 100ms: want 500ms or more"},
		{Config{Lease: -time.Second}, "lease -1s: want 500ms or more"},
		{Config{Coalesce: MaxCoalesce + 1}, "coalesce 101: want 0 (off) to 100"},
		{Config{Coalesce: -1}, "coalesce -1"},
		{Config{CoalesceWait: -time.Second}, "coalesce wait -1s"},
		{Config{Retain: -time.Second}, "retain -1s"},
		{Config{RetainKeys: -time.Second}, "retain keys -1s"},
		{Config{Producers: map[string]Producer{"p": nil}}, `producer "p" is nil`},
	} {
		c := tt.cfg.withDefaults()
		err := c.validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validate(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}
