package webhook

import "time"

// SetClock makes h read the time from now; tests freeze the clock so a
// signature made "301 s ahead" stays 301 s ahead when the handler checks it.
func (h *Handler) SetClock(now func() time.Time) { h.now = now }
