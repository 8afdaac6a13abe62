package client

import (
	"context"
	"encoding/json"
)

// TemplatesService is the templates resource: c.Templates.
type TemplatesService struct{ c *Client }

// Send sends an email rendered from a template (POST /templates/:id/send),
// where templateIDOrSlug is the template's id or slug. Like every send it
// carries an Idempotency-Key, reused by its retries.
func (s *TemplatesService) Send(ctx context.Context, templateIDOrSlug string, params *TemplateSendParams, opts ...RequestOption) (*Email, error) {
	body, err := encode("Templates.Send", params)
	if err != nil {
		return nil, err
	}
	return s.SendJSON(ctx, templateIDOrSlug, body, opts...)
}

// SendJSON is Send for a body already held as JSON, normalised as in
// EmailsService.SendJSON.
func (s *TemplatesService) SendJSON(ctx context.Context, templateIDOrSlug string, body json.RawMessage, opts ...RequestOption) (*Email, error) {
	path, err := idPath("/templates", templateIDOrSlug, "/send")
	if err != nil {
		return nil, err
	}
	return send[Email](ctx, s.c, "templates.send", path, body, opts)
}
