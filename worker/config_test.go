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
// naming it by its Go field (the command names its flags itself).
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{JobTimeout: time.Minute, RescueAfter: time.Minute}, "Config.RescueAfter (1m0s) must exceed Config.JobTimeout (1m0s)"},
		{Config{Send: SendConfig{MaxAttempts: MaxAttempts + 1}}, "SendConfig.MaxAttempts 100: want at most 99"},
		{Config{Send: SendConfig{ReplayWindow: 25 * time.Hour}}, "SendConfig.ReplayWindow 25h0m0s: want at most 24h0m0s"},
		{Config{Send: SendConfig{PartlySuppressed: "drop"}}, `SendConfig.PartlySuppressed "drop"`},
		{Config{Send: SendConfig{MaxPause: -time.Second}}, "SendConfig.MaxPause -1s"},
		{Config{Lease: 100 * time.Millisecond}, "Config.Lease 100ms: want 500ms or more"},
		{Config{Lease: -time.Second}, "Config.Lease -1s: want 500ms or more"},
		{Config{Coalesce: MaxCoalesce + 1}, "Config.Coalesce 101: want 0 (off) to 100"},
		{Config{Coalesce: -1}, "Config.Coalesce -1"},
		{Config{CoalesceWait: -time.Second}, "Config.CoalesceWait -1s"},
		{Config{Retain: -time.Second}, "Config.Retain -1s"},
		{Config{RetainKeys: -time.Second}, "Config.RetainKeys -1s"},
		{Config{Producers: map[string]Producer{"p": nil}}, `Config.Producers["p"] is nil`},
	} {
		c := tt.cfg.withDefaults()
		err := c.validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validate(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}
