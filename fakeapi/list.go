package fakeapi

import (
	"net/http"
	"strconv"
	"strings"
)

// Page sizes for list endpoints.
const (
	defaultPageLimit = 20
	maxPageLimit     = 100
)

// cursorPrefix starts every cursor the fake hands out. A cursor names the
// position after the last item of a page, not an item, so a page stays
// correct when items change status between pages.
const cursorPrefix = "cur_"

// listMessages answers a list endpoint with the messages keep accepts, newest
// first, in the envelope {"data":[…],"hasMore":bool,"nextCursor":string|null}.
// limit is 1 to 100 (default 20), else 422; an unknown cursor is 400.
func (s *Server) listMessages(c *call, keep func(*message) bool) {
	q := c.r.URL.Query()
	limit := defaultPageLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			c.fail(invalidField("limit", "invalid_field", "limit must be an integer from 1 to 100."))
			return
		}
		limit = n
	}
	before := int64(-1) // seq bound: only items older than the cursor
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(v, cursorPrefix), 10, 64)
		if !strings.HasPrefix(v, cursorPrefix) || err != nil || n < 1 {
			e := invalidRequest("invalid_cursor", "The cursor is not one this API returned.")
			e.param = "cursor"
			c.fail(e)
			return
		}
		before = n
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.promoteDueLocked(s.now())
	data := []any{}
	var next any
	var last int64
	for i := len(s.order) - 1; i >= 0; i-- {
		m := s.order[i]
		if (before >= 0 && m.seq >= before) || !keep(m) {
			continue
		}
		if len(data) == limit {
			next = cursorPrefix + strconv.FormatInt(last, 10)
			break
		}
		data = append(data, m.view())
		last = m.seq
	}
	c.reply(http.StatusOK, map[string]any{"data": data, "hasMore": next != nil, "nextCursor": next})
}
