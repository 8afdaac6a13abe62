package client

import (
	"context"
	"fmt"
)

// TemplatesService is the templates resource: c.Templates.
type TemplatesService struct{ c *Client }

// Send sends an email rendered from a template (POST /templates/:id/send),
// where templateIDOrSlug is the template's id or slug. Like every send it
// carries an Idempotency-Key, reused by its retries.
func (s *TemplatesService) Send(ctx context.Context, templateIDOrSlug string, params *TemplateSendParams, opts ...RequestOption) (*Email, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: Templates.Send: nil params", ErrInvalidRequest)
	}
	seg, err := escapeID(templateIDOrSlug)
	if err != nil {
		return nil, err
	}
	var e Email
	err = s.c.do(ctx, &request{call: "templates.send", method: methodPost, path: "/templates/" + seg + "/send", body: params, send: true, opts: opts}, &e)
	if err != nil {
		return nil, err
	}
	return &e, nil
}
