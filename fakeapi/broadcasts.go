package fakeapi

import (
	"net/http"
	"slices"
)

// getBroadcast is GET /broadcasts/{id}.
func (s *Server) getBroadcast(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.promoteDueLocked(s.now())
	m, err := s.lookupLocked(c.id, true)
	if err != nil {
		c.fail(err)
		return
	}
	c.reply(http.StatusOK, m.view())
}

// listBroadcasts is GET /broadcasts, newest first, optionally only those
// sent to audienceId.
func (s *Server) listBroadcasts(c *call) {
	audience := c.r.URL.Query().Get("audienceId")
	s.listMessages(c, func(m *message) bool {
		return m.isBroadcast() && (audience == "" || slices.Contains(m.spec.audienceIDs, audience))
	})
}

// cancelBroadcast is POST /broadcasts/{id}/cancel (no body).
func (s *Server) cancelBroadcast(c *call) { s.cancelMessage(c, true) }
