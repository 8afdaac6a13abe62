package fakeapi

import (
	"net/http"
	"slices"
	"time"
)

// runScheduler promotes due scheduled sends in the background, so that
// WaitDeliveries sees them even when nobody reads. With an injected clock it
// notices a moved clock within one interval.
func (s *Server) runScheduler(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			s.mu.Lock()
			s.promoteDueLocked(s.now())
			s.mu.Unlock()
		}
	}
}

// promoteDueLocked delivers every scheduled message whose time has come, in
// the order they fall due. Every read calls it first, so reads never show a
// due message as still scheduled.
func (s *Server) promoteDueLocked(now time.Time) {
	var due []*message
	for _, m := range s.scheduled {
		if !m.spec.scheduledAt.After(now) {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b *message) int {
		if c := a.spec.scheduledAt.Compare(b.spec.scheduledAt); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	for _, m := range due {
		s.deliverLocked(m, now)
	}
}

// cancelMessage is POST /emails/{id}/cancel and POST /broadcasts/{id}/cancel.
// Cancelling a scheduled message keeps it from ever being delivered.
// Cancelling a cancelled one answers it unchanged (cancel is retried by the
// SDKs, so the retry of a cancel whose answer was lost must succeed).
// Cancelling a sent one is 409 conflict_error, code email_already_sent or
// broadcast_already_sent.
func (s *Server) cancelMessage(c *call, broadcast bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.promoteDueLocked(now)
	m, err := s.lookupLocked(c.id, broadcast)
	if err != nil {
		c.fail(err)
		return
	}
	switch m.status {
	case statusScheduled:
		m.status = statusCancelled
		m.cancelledAt = now
		delete(s.scheduled, m.id)
	case statusCancelled:
	default:
		c.fail(alreadySent(m))
		return
	}
	c.reply(http.StatusOK, m.view())
}

// rescheduleLocked moves a scheduled email to at; a time not in the future
// sends it now, as at creation. A sent email is 409 email_already_sent, a
// cancelled one 409 email_cancelled.
func (s *Server) rescheduleLocked(m *message, at, now time.Time) *apiError {
	switch m.status {
	case statusScheduled:
	case statusCancelled:
		return newError(http.StatusConflict, typeConflict, "email_cancelled",
			"The email "+m.id+" was cancelled and cannot be rescheduled.")
	default:
		return alreadySent(m)
	}
	m.spec.scheduledAt = at
	if !at.After(now) {
		s.deliverLocked(m, now)
	}
	return nil
}

func alreadySent(m *message) *apiError {
	what := "email"
	if m.isBroadcast() {
		what = "broadcast"
	}
	return newError(http.StatusConflict, typeConflict, what+"_already_sent",
		"The "+what+" "+m.id+" was already sent; only a scheduled "+what+" can be changed or cancelled.")
}
