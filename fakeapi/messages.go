package fakeapi

import "time"

// Kind says which send created a message. It is Delivery.Kind.
type Kind string

// The four sends.
const (
	KindEmail     Kind = "email"     // POST /emails
	KindBatch     Kind = "batch"     // POST /emails/batch, one per email
	KindTemplate  Kind = "template"  // POST /templates/{id}/send
	KindBroadcast Kind = "broadcast" // POST /broadcasts
)

// Message statuses. The fake delivers synchronously, so an email goes from
// scheduled (or nothing) straight to sent; queued is accepted as a list
// filter but never held.
const (
	statusScheduled = "scheduled"
	statusQueued    = "queued"
	statusSent      = "sent"
	statusCancelled = "cancelled"
	// statusFailed marks a batch email the API refused (a reject fault); it
	// is never a message's status, as a refused email makes no message.
	statusFailed = "failed"
)

// timeFormat is how instants are written: UTC with milliseconds, as the SDKs
// write them.
const timeFormat = "2006-01-02T15:04:05.000Z"

// message is one email or broadcast the fake accepted.
type message struct {
	seq         int64
	id          string
	kind        Kind
	status      string
	spec        messageSpec
	createdAt   time.Time
	sentAt      time.Time
	cancelledAt time.Time
	idemKey     string
	requestID   string
	apiKey      string  // of the request that created it: event rules count times under it
	eventFaults []Fault // the event rules of the request's X-Fake-Fault headers
}

func (m *message) isBroadcast() bool { return m.kind == KindBroadcast }

// createLocked stores a new message for the call and delivers it unless it
// is scheduled for later.
func (s *Server) createLocked(c *call, kind Kind, spec messageSpec, now time.Time) *message {
	s.seq++
	prefix := "em_"
	if kind == KindBroadcast {
		prefix = "bc_"
	}
	m := &message{
		seq:       s.seq,
		id:        newID(prefix),
		kind:      kind,
		spec:      spec,
		createdAt: now,
		idemKey:   c.idemKey,
		requestID: c.requestID,
		apiKey:    c.apiKey,
	}
	for _, f := range c.faults {
		if f.Kind.phase() == phaseEvent {
			m.eventFaults = append(m.eventFaults, f)
		}
	}
	s.messages[m.id] = m
	s.order = append(s.order, m)
	if spec.scheduledAt.After(now) {
		m.status = statusScheduled
		s.scheduled[m.id] = m
	} else {
		s.deliverLocked(m, now)
	}
	return m
}

// deliverLocked sends a message: it enters the ledger and becomes sent.
func (s *Server) deliverLocked(m *message, now time.Time) {
	m.status = statusSent
	m.sentAt = now
	delete(s.scheduled, m.id)
	to := m.spec.to
	if m.isBroadcast() {
		to = m.spec.audienceIDs
	}
	s.deliveries = append(s.deliveries, Delivery{
		MessageID:      m.id,
		IdempotencyKey: m.idemKey,
		Kind:           m.kind,
		To:             to,
		Cc:             m.spec.cc,
		Bcc:            m.spec.bcc,
		From:           m.spec.from,
		Subject:        m.spec.subject,
		TemplateID:     m.spec.templateID,
		DeliveredAt:    now,
		RequestID:      m.requestID,
		Payload:        m.spec.payload,
	})
	s.queueEventsLocked(m, now)
	s.notifyLocked()
}

// lookupLocked finds an email (broadcast false) or a broadcast by id.
func (s *Server) lookupLocked(id string, broadcast bool) (*message, *apiError) {
	m := s.messages[id]
	if m == nil || m.isBroadcast() != broadcast {
		what := "email"
		if broadcast {
			what = "broadcast"
		}
		return nil, notFound("No " + what + " with id " + id + ".")
	}
	return m, nil
}

// emailView is an email as the API answers it.
type emailView struct {
	ID          string   `json:"id"`
	Status      string   `json:"status"`
	From        string   `json:"from"`
	To          []string `json:"to"`
	Cc          []string `json:"cc,omitempty"`
	Bcc         []string `json:"bcc,omitempty"`
	Subject     string   `json:"subject,omitempty"`
	TemplateID  string   `json:"templateId,omitempty"`
	ScheduledAt *string  `json:"scheduledAt"`
	CreatedAt   string   `json:"createdAt"`
	SentAt      *string  `json:"sentAt"`
	CancelledAt *string  `json:"cancelledAt"`
	Replayed    *bool    `json:"replayed,omitempty"`
}

// broadcastView is a broadcast as the API answers it.
type broadcastView struct {
	ID          string   `json:"id"`
	Status      string   `json:"status"`
	From        string   `json:"from"`
	Subject     string   `json:"subject"`
	AudienceIDs []string `json:"audienceIds"`
	ScheduledAt *string  `json:"scheduledAt"`
	CreatedAt   string   `json:"createdAt"`
	SentAt      *string  `json:"sentAt"`
	CancelledAt *string  `json:"cancelledAt"`
	Replayed    *bool    `json:"replayed,omitempty"`
}

func (m *message) view() any {
	if m.isBroadcast() {
		return broadcastView{
			ID:          m.id,
			Status:      m.status,
			From:        m.spec.from,
			Subject:     m.spec.subject,
			AudienceIDs: m.spec.audienceIDs,
			ScheduledAt: instant(m.spec.scheduledAt),
			CreatedAt:   m.createdAt.UTC().Format(timeFormat),
			SentAt:      instant(m.sentAt),
			CancelledAt: instant(m.cancelledAt),
		}
	}
	return m.emailView()
}

func (m *message) emailView() emailView {
	return emailView{
		ID:          m.id,
		Status:      m.status,
		From:        m.spec.from,
		To:          m.spec.to,
		Cc:          m.spec.cc,
		Bcc:         m.spec.bcc,
		Subject:     m.spec.subject,
		TemplateID:  m.spec.templateID,
		ScheduledAt: instant(m.spec.scheduledAt),
		CreatedAt:   m.createdAt.UTC().Format(timeFormat),
		SentAt:      instant(m.sentAt),
		CancelledAt: instant(m.cancelledAt),
	}
}

// failedView is a batch email the API refused, in the batch answer's data
// in the email's place: no id, as no message exists.
type failedView struct {
	Status string        `json:"status"` // always "failed"
	To     []string      `json:"to"`
	Error  itemErrorView `json:"error"`
}

// itemErrorView is why one batch email was refused: the fields of an error
// answer, for that email alone.
type itemErrorView struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param"`
}

// sendViewLocked is a send's answer: the created resource(s) in their current
// state, with "replayed" saying whether this request sent anything. A
// batch's data holds one item per email asked for, in request order: the
// email, or its refusal; sent and failed count them.
func (s *Server) sendViewLocked(r sendResult, replayed bool) any {
	switch r.kind {
	case KindBatch:
		data := make([]any, 0, len(r.items))
		failed := 0
		for _, it := range r.items {
			if e := it.refused; e != nil {
				failed++
				data = append(data, failedView{Status: statusFailed, To: it.to,
					Error: itemErrorView{Type: e.typ, Code: e.code, Message: e.message, Param: e.param}})
				continue
			}
			data = append(data, s.messages[it.id].emailView())
		}
		return map[string]any{"data": data, "sent": len(data) - failed, "failed": failed, "replayed": replayed}
	case KindBroadcast:
		v := s.messages[r.items[0].id].view().(broadcastView)
		v.Replayed = &replayed
		return v
	default:
		v := s.messages[r.items[0].id].emailView()
		v.Replayed = &replayed
		return v
	}
}

func instant(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(timeFormat)
	return &s
}
