package integration

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The model of the webhook events and the suppression list, and its
// rules:
//
//	7  after quiescence the suppression list is what its changes make of it
//	   in the order of their own times: an event's createdAt, a change by
//	   hand's time (within the call); the latest wins, an addition at a tie
//	8  an event is stored and applied once per signed event id: a post of
//	   an event stored before (answered 2xx) is answered duplicate, whatever
//	   its X-OpenEmail-Delivery header says
//	9  a sent intent's delivery status is the highest, by the precedence of
//	   outbox.DeliveryStatus (rank, then the event's time, then the name),
//	   of its messages' events (all of a batch-kind intent's messages)
//
// and rule 3 holds a suppression an event made as one made by hand: nothing
// delivered to an address whose suppression was certainly in force when
// the intent was first claimed.

// sysEvent is one signed event, by its id, as the posts of it tell.
type sysEvent struct {
	ID, Type, EmailID string
	Created           time.Time
	Addrs             []string
	Soft              bool
	// Stored is outYes when a post of it was answered 2xx, outUncertain
	// when one may have been stored (a 500 or a connection gone).
	Stored sysOutcome
	// Its first store committed within [ApplyLo, ApplyHi] (ApplyHi: the
	// first 2xx answer).
	ApplyLo, ApplyHi time.Time
	Posts            []*hookPost
}

// effect is what the event does to the list (webhook/doc.go): a hard
// bounce, a complaint, email.suppressed and suppression.added add its
// addresses; suppression.removed removes them.
func (e *sysEvent) effect() (add, remove bool) {
	switch e.Type {
	case "email.bounced":
		return !e.Soft, false
	case "email.complained", "email.suppressed", "suppression.added":
		return true, false
	case "suppression.removed":
		return false, true
	}
	return false, false
}

// sysChange is one change of an address's place on the suppression list.
type sysChange struct {
	Add bool
	// Its place in the list's order: an event's createdAt (exact), or
	// the time of a change by hand (somewhere within the call).
	StampLo, StampHi time.Time
	// It was committed within [ApplyLo, ApplyHi]; ApplyHi holds only when
	// Certain.
	ApplyLo, ApplyHi time.Time
	Certain          bool
	What             string
}

// setPosts takes the proxy's record of every post and derives the events
// and every address's changes (the ones by hand from addrOps).
func (m *model) setPosts(posts []*hookPost) {
	m.posts = slices.Clone(posts)
	sort.SliceStable(m.posts, func(i, j int) bool { return m.posts[i].Start.Before(m.posts[j].Start) })
	m.events, m.eventOrder, m.byEmail = map[string]*sysEvent{}, nil, map[string][]*sysEvent{}
	for _, p := range m.posts {
		if p.EventID == "" {
			continue
		}
		e := m.events[p.EventID]
		if e == nil {
			e = &sysEvent{ID: p.EventID, Type: p.Type, EmailID: p.EmailID, Created: p.Created, Addrs: p.Addrs, Soft: p.Soft}
			m.events[p.EventID] = e
			m.eventOrder = append(m.eventOrder, p.EventID)
			if e.EmailID != "" {
				m.byEmail[e.EmailID] = append(m.byEmail[e.EmailID], e)
			}
		}
		e.Posts = append(e.Posts, p)
		o := p.outcome()
		if o == outNo {
			continue
		}
		if e.ApplyLo.IsZero() || p.Start.Before(e.ApplyLo) {
			e.ApplyLo = p.Start
		}
		switch {
		case o == outYes && (e.Stored != outYes || p.End.Before(e.ApplyHi)):
			e.Stored, e.ApplyHi = outYes, p.End
		case o == outUncertain && e.Stored == outNo:
			e.Stored = outUncertain
		}
	}
	m.changes = map[string][]sysChange{}
	for addr, ops := range m.addrOps {
		for _, a := range ops {
			if a.Result == outNo {
				continue
			}
			what := "removed"
			if a.Add {
				what = "added"
			}
			m.changes[addr] = append(m.changes[addr], sysChange{Add: a.Add, StampLo: a.Start, StampHi: a.End, ApplyLo: a.Start, ApplyHi: a.End,
				Certain: a.Result == outYes, What: fmt.Sprintf("%s by hand by #%d (%s)", what, a.Seq, a.Result)})
		}
	}
	for _, id := range m.eventOrder {
		e := m.events[id]
		add, remove := e.effect()
		if e.Stored == outNo || (!add && !remove) {
			continue
		}
		lo, hi := e.Created, e.Created
		if lo.IsZero() {
			lo, hi = e.ApplyLo, e.ApplyHi // no time of its own: the time received
		}
		for _, a := range e.Addrs {
			m.changes[a] = append(m.changes[a], sysChange{Add: add, StampLo: lo, StampHi: hi, ApplyLo: e.ApplyLo, ApplyHi: e.ApplyHi,
				Certain: e.Stored == outYes, What: fmt.Sprintf("%s %s (stored: %s)", e.ID, e.Type, e.Stored)})
		}
	}
}

// suppressedAt says whether addr was certainly, or possibly, on the
// suppression list at instant c: the list holds, of the changes committed
// by then, what the latest by its own time says (an addition at a tie).
// Certainly: some addition was committed before c, and every removal that
// may have been committed before c is certainly older. Possibly: some
// addition may have been committed before c, and no removal certainly
// committed before c is certainly newer.
func (m *model) suppressedAt(addr string, c time.Time) (certain, possible bool) {
	chs := m.changes[addr]
	for _, a := range chs {
		if !a.Add || !a.ApplyLo.Before(c) {
			continue
		}
		cert := a.Certain && a.ApplyHi.Before(c)
		poss := true
		for _, r := range chs {
			if r.Add || !r.ApplyLo.Before(c) {
				continue
			}
			if r.StampHi.After(a.StampLo) {
				cert = false
			}
			if r.Certain && r.ApplyHi.Before(c) && r.StampLo.After(a.StampHi) {
				poss = false
			}
		}
		certain = certain || cert
		possible = possible || poss || cert
	}
	return certain, possible
}

// possiblySuppressedDuring reports whether addr may have been on the list
// at some instant in [lo, hi].
func (m *model) possiblySuppressedDuring(addr string, lo, hi time.Time) bool {
	for _, t := range m.instantsWithin(addr, lo, hi) {
		if _, poss := m.suppressedAt(addr, t); poss {
			return true
		}
	}
	return false
}

// certainlySuppressedThroughout reports whether addr was certainly on the
// list at every instant in [lo, hi]: certainly added before lo, and no
// removal that may have been committed within the interval.
func (m *model) certainlySuppressedThroughout(addr string, lo, hi time.Time) bool {
	for _, t := range m.instantsWithin(addr, lo, hi) {
		if cert, _ := m.suppressedAt(addr, t); !cert {
			return false
		}
	}
	return true
}

// instantsWithin are the instants at which the list may differ for addr
// within [lo, hi]: both ends and just after each change that began or
// ended within the interval.
func (m *model) instantsWithin(addr string, lo, hi time.Time) []time.Time {
	at := []time.Time{lo, hi}
	for _, c := range m.changes[addr] {
		for _, t := range []time.Time{c.ApplyLo, c.ApplyHi} {
			if t.After(lo) && t.Before(hi) {
				at = append(at, t.Add(time.Nanosecond))
			}
		}
	}
	return at
}

// everSuppressed reports whether any addition of addr may have been made.
func (m *model) everSuppressed(addr string) bool {
	for _, c := range m.changes[addr] {
		if c.Add {
			return true
		}
	}
	return false
}

// changesText lists an address's changes in the order of their times.
func (m *model) changesText(addr string) string {
	chs := slices.Clone(m.changes[addr])
	sort.SliceStable(chs, func(i, j int) bool { return chs[i].StampLo.Before(chs[j].StampLo) })
	var parts []string
	for _, c := range chs {
		stamp := c.StampLo.Format("15:04:05.000")
		if !c.StampHi.Equal(c.StampLo) {
			stamp += ".." + c.StampHi.Format("15:04:05.000")
		}
		parts = append(parts, fmt.Sprintf("%s at %s committed [%s..%s]", c.What, stamp, c.ApplyLo.Format("15:04:05.000"), fmtTime(&c.ApplyHi)))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}

// farFuture is an instant after every change: the list's final state.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// checkList is rule 7: the list after quiescence.
func (m *model) checkList(f sysFinal) {
	on := map[string]bool{}
	addrs := slices.Clone(f.suppressed)
	for _, a := range f.suppressed {
		on[a] = true
	}
	for a := range m.changes {
		if !on[a] {
			addrs = append(addrs, a)
		}
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		cert, poss := m.suppressedAt(a, farFuture)
		switch {
		case on[a] && !poss:
			m.violate("7", nil, []string{a}, "%s is on the suppression list, but no order of its changes' own times leaves it there: %s", a, m.changesText(a))
		case !on[a] && cert:
			m.violate("7", nil, []string{a}, "%s is not on the suppression list, but the latest of its changes by their own times adds it: %s", a, m.changesText(a))
		}
	}
}

// checkOnce is rule 8: a post of an event stored before is answered as a
// duplicate, and only such a post is. A prune deletes an intent's events
// with it, so an event about a message of an intent pruned since may be
// stored again (and, by its old time, changes nothing): it is not held.
func (m *model) checkOnce(f sysFinal) {
	pruned := map[string]bool{}
	for _, d := range f.deliveries {
		cause, _ := causeOf(d)
		if row, ok := f.rows[keyOfCause(cause)]; !ok || row.Pruned {
			pruned[d.MessageID] = true
		}
	}
	for _, id := range m.eventOrder {
		e := m.events[id]
		if e.EmailID != "" && pruned[e.EmailID] {
			continue
		}
		for _, p := range e.Posts {
			if p.outcome() != outYes {
				continue
			}
			var storedBy *hookPost
			mayBefore := false
			for _, q := range e.Posts {
				if q == p {
					continue
				}
				if q.outcome() == outYes && q.End.Before(p.Start) && storedBy == nil {
					storedBy = q
				}
				if q.outcome() != outNo && q.Start.Before(p.End) {
					mayBefore = true
				}
			}
			switch {
			case storedBy != nil && !p.Duplicate:
				m.violate("8", nil, e.Addrs, "event %s (%s) was stored again: posted by %s under delivery header %q after it was stored (by %s under %q, answered %s), answered %d duplicate=false",
					e.ID, e.Type, p.Source, p.Delivery, storedBy.Source, storedBy.Delivery, storedBy.End.Format("15:04:05.000"), p.Status)
			case !mayBefore && p.Duplicate:
				m.violate("8", nil, e.Addrs, "event %s (%s) posted by %s was answered duplicate=true, but no post of it came before", e.ID, e.Type, p.Source)
			}
		}
	}
}

// The delivery statuses of the event types, and their ranks
// (outbox.DeliveryStatus).
var (
	eventStatus = map[string]string{"email.delivery_delayed": "delivery_delayed", "email.delivered": "delivered", "email.failed": "failed",
		"email.bounced": "bounced", "email.suppressed": "suppressed", "email.complained": "complained"}
	statusRank = map[string]int{"delivery_delayed": 1, "delivered": 2, "failed": 3, "bounced": 3, "suppressed": 3, "complained": 4}
)

// statusAfter reports whether event a's status replaces b's (nil: none).
func statusAfter(a, b *sysEvent) bool {
	if b == nil {
		return true
	}
	sa, sb := eventStatus[a.Type], eventStatus[b.Type]
	if statusRank[sa] != statusRank[sb] {
		return statusRank[sa] > statusRank[sb]
	}
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	return sa > sb
}

// statusWanted is rule 9 for one row: the delivery statuses its messages'
// events allow (the one of the events certainly stored, or one of an
// event that may have been), or ok false when the rule does not hold the
// row (not sent, or pruned).
func (m *model) statusWanted(row sysRow) (want []string, ok bool) {
	if row.State != "sent" || row.MessageID == "" || row.Pruned {
		return nil, false
	}
	var best *sysEvent
	var maybe []*sysEvent
	for _, id := range strings.Split(row.MessageID, ",") {
		for _, e := range m.byEmail[id] {
			if eventStatus[e.Type] == "" {
				continue
			}
			switch e.Stored {
			case outYes:
				if statusAfter(e, best) {
					best = e
				}
			case outUncertain:
				maybe = append(maybe, e)
			}
		}
	}
	if best == nil {
		want = []string{""}
	} else {
		want = []string{eventStatus[best.Type]}
	}
	for _, e := range maybe {
		if statusAfter(e, best) {
			want = append(want, eventStatus[e.Type])
		}
	}
	return want, true
}

// checkStatuses is rule 9.
func (m *model) checkStatuses(f sysFinal) {
	for _, key := range m.order {
		row, ok := f.rows[key]
		if !ok {
			continue
		}
		want, ok := m.statusWanted(row)
		if !ok || slices.Contains(want, row.Delivery) {
			continue
		}
		var evs []string
		for _, id := range strings.Split(row.MessageID, ",") {
			for _, e := range m.byEmail[id] {
				evs = append(evs, fmt.Sprintf("%s %s of %s at %s (stored: %s)", e.ID, e.Type, id, e.Created.Format("15:04:05.000"), e.Stored))
			}
		}
		m.violate("9", []string{key}, nil, "%s (%s, messages %s) has delivery status %q, but its messages' events give %q: %s",
			key, row.Kind, row.MessageID, row.Delivery, want[0], strings.Join(evs, "; "))
	}
}

// eventsText lists the stored (or possibly stored) events naming any of
// addrs, for a violation's explanation.
func (m *model) eventsText(addrs []string) []string {
	var out []string
	for _, id := range m.eventOrder {
		e := m.events[id]
		if e.Stored == outNo || !slices.ContainsFunc(e.Addrs, func(a string) bool { return slices.Contains(addrs, a) }) {
			continue
		}
		if add, remove := e.effect(); !add && !remove {
			continue
		}
		for _, p := range e.Posts {
			out = append(out, p.String())
		}
	}
	return out
}
