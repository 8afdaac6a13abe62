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
// and one delivery per email sent. A malformed email refuses the whole batch
// (422, nothing sent); an email a reject fault refuses is listed as failed
// in its place while the others are sent.
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
//  5. reject faults refuse the emails they match: a refused single send is
//     answered 422 and releases the key; a batch's refused emails are left
//     out of the sending and listed as failed in its answer;
//  6. the messages are created and delivered (or scheduled), and the key
//     stores the answer: the messages and, for a batch, the refusals.
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
	refused := make([]*apiError, len(specs))
	if kind != KindBroadcast {
		refused = s.rejectLocked(c, kind == KindBatch, specs)
	}
	if kind != KindBatch && refused[0] != nil {
		// A single send the API refuses makes nothing, as a validation
		// error does: nothing is stored under the key, which is free again.
		if entry != nil {
			s.releaseKeyLocked(c, entry)
		}
		c.rec.Rejected = 1
		c.fail(refused[0])
		return
	}
	now := s.now()
	result := sendResult{kind: kind}
	for i, spec := range specs {
		if refused[i] != nil {
			result.items = append(result.items, sendItem{to: spec.to, refused: refused[i]})
			c.rec.Rejected++
			continue
		}
		result.items = append(result.items, sendItem{id: s.createLocked(c, kind, spec, now).id})
	}
	if entry != nil {
		s.completeKeyLocked(entry, result)
	}
	c.reply(http.StatusOK, s.sendViewLocked(result, false))
}
