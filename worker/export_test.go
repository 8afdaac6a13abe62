package worker

import "time"

// SetQuotaClock makes the budget of a worker made from cfg count quotas by
// now rather than the database's clock, so a test can move past midnight.
func SetQuotaClock(cfg *Config, now func() time.Time) { cfg.now = now }
