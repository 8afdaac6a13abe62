package fakeapi

import "net/http"

// sendEmail is POST /emails.
func (s *Server) sendEmail(c *call) {
	s.send(c, KindEmail, func(m map[string]any) ([]messageSpec, *apiError) {
		spec, err := parseEmail(m, "")
		return []messageSpec{spec}, err
	})
}

// sendBatch is POST /emails/batch: one key for the whole batch, one message
// and one delivery per email.
func (s *Server) sendBatch(c *call) {
	s.send(c, KindBatch, parseBatch)
}

// sendTemplate is POST /templates/{id}/send. The fake keeps no templates:
// any id or slug is accepted and supplies the content.
func (s *Server) sendTemplate(c *call) {
	s.send(c, KindTemplate, func(m map[string]any) ([]messageSpec, *apiError) {
		spec, err := parseTemplateSend(m, c.id)
		return []messageSpec{spec}, err
	})
}

// sendBroadcast is POST /broadcasts: creating a broadcast sends it.
func (s *Server) sendBroadcast(c *call) {
	s.send(c, KindBroadcast, func(m map[string]any) ([]messageSpec, *apiError) {
		spec, err := parseBroadcast(m)
		return []messageSpec{spec}, err
	})
}

// send is the path every send takes:
//
//  1. an Idempotency-Key, if sent, must be well formed (400 otherwise);
//  2. the body must be a JSON object (400 otherwise);
//  3. the body is validated, but a validation error is answered only if the
//     key does not already hold this exact request: a replay never depends
//     on re-validation, and a different body under a used key is a reuse;
//  4. the key is claimed before anything is delivered, so a racing or
//     retried request with the same key waits and replays instead of
//     sending again;
//  5. the messages are created and delivered (or scheduled), and the key
//     stores them.
//
// A send without an Idempotency-Key is accepted and simply sent: every such
// request sends again.
func (s *Server) send(c *call, kind Kind, parse func(map[string]any) ([]messageSpec, *apiError)) {
	if c.hasKey && !validKey(c.idemKey) {
		c.fail(invalidKey())
		return
	}
	body, err := decodeObject(c.body)
	if err != nil {
		c.fail(err)
		return
	}
	specs, invalid := parse(body)

	var entry *keyEntry
	if c.hasKey {
		fp := fingerprint(c.r.Method, c.r.URL.EscapedPath(), body)
		claimed, replay, abandoned, err := s.claimKey(c, fp, invalid)
		switch {
		case abandoned:
			c.abandon()
			return
		case err != nil:
			c.fail(err)
			return
		case replay != nil:
			s.mu.Lock()
			c.rec.Replayed = true
			s.mu.Unlock()
			c.reply(http.StatusOK, replay)
			return
		}
		entry = claimed
		if s.testHook != nil {
			s.testHook("claimed")
		}
	} else if invalid != nil {
		c.fail(invalid)
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	result := sendResult{kind: kind}
	for _, spec := range specs {
		result.ids = append(result.ids, s.createLocked(c, kind, spec, now).id)
	}
	if entry != nil {
		s.completeKeyLocked(entry, result)
	}
	c.reply(http.StatusOK, s.sendViewLocked(result, false))
}
