package worker

import "time"

// SetQuotaClock makes the budget of a worker made from cfg count quotas by
// now rather than the database's clock, so a test can move past midnight.
func SetQuotaClock(cfg *Config, now func() time.Time) { cfg.now = now }

// SetAfterSend makes w run f after the API answered each send and before
// its outcome is recorded; an error from f stands for a failure in that
// window. Set it before Start.
func SetAfterSend(w *Worker, f func(key string) error) { w.sendWorker.afterSend = f }

// SetReportInterval makes a worker made from cfg write its DrainReportArgs
// job every d.
func SetReportInterval(cfg *Config, d time.Duration) { cfg.reportInterval = d }
