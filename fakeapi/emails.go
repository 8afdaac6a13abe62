package fakeapi

import (
	"net/http"
	"slices"
	"strings"
)

// emailStatuses are the values GET /emails accepts in its status filter.
var emailStatuses = []string{statusScheduled, statusQueued, statusSent, statusCancelled}

// getEmail is GET /emails/{id}.
func (s *Server) getEmail(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.promoteDueLocked(s.now())
	m, err := s.lookupLocked(c.id, false)
	if err != nil {
		c.fail(err)
		return
	}
	c.reply(http.StatusOK, m.view())
}

// listEmails is GET /emails: newest first, filtered by status (a comma list)
// and from, paged by limit and cursor. Other filters of the real API
// (broadcastId, scheduledFrom, scheduledTo) are ignored.
func (s *Server) listEmails(c *call) {
	q := c.r.URL.Query()
	var statuses []string
	if v := q.Get("status"); v != "" {
		for st := range strings.SplitSeq(v, ",") {
			st = strings.TrimSpace(st)
			if !slices.Contains(emailStatuses, st) {
				c.fail(invalidField("status", "invalid_field",
					"status must be a comma list of "+strings.Join(emailStatuses, ", ")+"."))
				return
			}
			statuses = append(statuses, st)
		}
	}
	from := q.Get("from")
	s.listMessages(c, func(m *message) bool {
		return !m.isBroadcast() &&
			(len(statuses) == 0 || slices.Contains(statuses, m.status)) &&
			(from == "" || strings.EqualFold(m.spec.from, from))
	})
}

// updateEmail is PATCH /emails/{id}. The fake supports the reschedule form,
// {"scheduledAt": instant}; any other field is refused with 422 naming it, so
// a test never believes an update happened that the fake ignored.
func (s *Server) updateEmail(c *call) {
	body, err := decodeObject(c.body)
	if err != nil {
		c.fail(err)
		return
	}
	for k := range body {
		if k != "scheduledAt" {
			c.fail(invalidField(k, "unsupported_field", "The fake can only change scheduledAt of an email."))
			return
		}
	}
	if body["scheduledAt"] == nil {
		c.fail(missingField("scheduledAt"))
		return
	}
	at, err := scheduledAt(body, "scheduledAt")
	if err != nil {
		c.fail(err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.promoteDueLocked(now)
	m, err := s.lookupLocked(c.id, false)
	if err != nil {
		c.fail(err)
		return
	}
	if err := s.rescheduleLocked(m, at, now); err != nil {
		c.fail(err)
		return
	}
	c.reply(http.StatusOK, m.view())
}

// cancelEmail is POST /emails/{id}/cancel (no body).
func (s *Server) cancelEmail(c *call) { s.cancelMessage(c, false) }
