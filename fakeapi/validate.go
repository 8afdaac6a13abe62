package fakeapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"time"
)

// messageSpec is a validated send: what one email (or one broadcast) will be.
type messageSpec struct {
	from        string
	to, cc, bcc []string
	audienceIDs []string
	subject     string
	templateID  string
	scheduledAt time.Time // zero: send now
	payload     json.RawMessage
}

// decodeObject parses a request body that must be one JSON object. Numbers
// stay json.Number so the canonical form keeps their text.
func decodeObject(body []byte) (map[string]any, *apiError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalidRequest("invalid_json", "The request body is not valid JSON: "+err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalidRequest("invalid_json", "The request body has data after its JSON value.")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalidRequest("invalid_json", "The request body must be a JSON object.")
	}
	return obj, nil
}

// objectKeys are the email keys the SDKs always send as JSON objects, never
// arrays, even when empty (Internal/WireShapes.php). A client that sends [] for
// an empty one is caught here.
var objectKeys = []string{"headers", "tags", "tracking", "template", "translate", "values",
	"settings", "copy", "document", "style", "loginBackground", "webFont"}

// parseEmail validates one email body of POST /emails or of a batch (prefix
// "emails[i]."). Content is html, text, a draftId or a template object.
func parseEmail(m map[string]any, prefix string) (messageSpec, *apiError) {
	spec, err := parseCommon(m, prefix)
	if err != nil {
		return spec, err
	}
	if !hasContent(m) {
		return spec, invalidField(prefix+"html", "missing_content",
			"An email needs content: html, text, a draftId or a template.")
	}
	return spec, nil
}

// parseTemplateSend validates the body of POST /templates/{id}/send; the
// template supplies the content and may supply the subject.
func parseTemplateSend(m map[string]any, templateID string) (messageSpec, *apiError) {
	spec, err := parseCommon(m, "")
	if err != nil {
		return spec, err
	}
	for _, k := range []string{"props", "slots"} {
		if err := checkObject(m, k, k); err != nil {
			return spec, err
		}
	}
	spec.templateID = templateID
	return spec, nil
}

// parseBroadcast validates the body of POST /broadcasts: an audience
// (audienceId or audienceIds), from, subject and content. Recipients come from
// the audience, so to/cc/bcc are not required.
func parseBroadcast(m map[string]any) (messageSpec, *apiError) {
	var spec messageSpec
	var err *apiError
	if spec.from, err = requiredAddress(m, "from", "from"); err != nil {
		return spec, err
	}
	if spec.audienceIDs, err = audiences(m); err != nil {
		return spec, err
	}
	if spec.subject, err = optionalString(m, "subject", "subject"); err != nil {
		return spec, err
	}
	if spec.subject == "" {
		return spec, missingField("subject")
	}
	if spec.scheduledAt, err = scheduledAt(m, "scheduledAt"); err != nil {
		return spec, err
	}
	if err := checkContentTypes(m, ""); err != nil {
		return spec, err
	}
	if !hasContent(m) {
		return spec, invalidField("html", "missing_content", "A broadcast needs content: html, text or a template.")
	}
	spec.payload = canonical(m)
	return spec, nil
}

// parseBatch validates {"emails":[…]} of POST /emails/batch. The whole batch
// is refused if any email is invalid, so nothing of it is sent.
func parseBatch(m map[string]any) ([]messageSpec, *apiError) {
	raw, ok := m["emails"]
	if !ok || raw == nil {
		return nil, missingField("emails")
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, invalidField("emails", "invalid_field", "emails must be an array of email objects.")
	}
	if len(list) == 0 {
		return nil, invalidField("emails", "invalid_field", "emails must not be empty.")
	}
	specs := make([]messageSpec, 0, len(list))
	for i, item := range list {
		prefix := fmt.Sprintf("emails[%d].", i)
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, invalidField(strings.TrimSuffix(prefix, "."), "invalid_field", "Each email must be a JSON object.")
		}
		spec, err := parseEmail(obj, prefix)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// parseCommon checks what every email-like send needs: from, to, optional
// cc/bcc/subject/scheduledAt, well-formed content fields and attachments.
func parseCommon(m map[string]any, prefix string) (messageSpec, *apiError) {
	var spec messageSpec
	var err *apiError
	if spec.from, err = requiredAddress(m, "from", prefix+"from"); err != nil {
		return spec, err
	}
	if spec.to, err = recipients(m, "to", prefix+"to", true); err != nil {
		return spec, err
	}
	if spec.cc, err = recipients(m, "cc", prefix+"cc", false); err != nil {
		return spec, err
	}
	if spec.bcc, err = recipients(m, "bcc", prefix+"bcc", false); err != nil {
		return spec, err
	}
	if spec.subject, err = optionalString(m, "subject", prefix+"subject"); err != nil {
		return spec, err
	}
	if spec.scheduledAt, err = scheduledAt(m, prefix+"scheduledAt"); err != nil {
		return spec, err
	}
	if err := checkContentTypes(m, prefix); err != nil {
		return spec, err
	}
	if err := checkAttachments(m, prefix); err != nil {
		return spec, err
	}
	spec.payload = canonical(m)
	return spec, nil
}

// checkContentTypes checks html/text/draftId are strings and the object-only
// keys are objects.
func checkContentTypes(m map[string]any, prefix string) *apiError {
	for _, k := range []string{"html", "text", "draftId"} {
		if _, err := optionalString(m, k, prefix+k); err != nil {
			return err
		}
	}
	for _, k := range objectKeys {
		if err := checkObject(m, k, prefix+k); err != nil {
			return err
		}
	}
	for _, outer := range []string{"template", "values"} {
		inner, _ := m[outer].(map[string]any)
		for _, k := range []string{"props", "slots"} {
			if err := checkObject(inner, k, prefix+outer+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasContent reports whether a body carries something to send.
func hasContent(m map[string]any) bool {
	for _, k := range []string{"html", "text", "draftId"} {
		if s, _ := m[k].(string); s != "" {
			return true
		}
	}
	tmpl, _ := m["template"].(map[string]any)
	return len(tmpl) > 0
}

// recipients reads to/cc/bcc. The SDKs always send an array, even for one
// address, so a bare string is a client bug and refused.
func recipients(m map[string]any, key, param string, required bool) ([]string, *apiError) {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			return nil, missingField(param)
		}
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		if _, isString := v.(string); isString {
			return nil, invalidField(param, "invalid_field",
				param+" must be an array of addresses; send one address as a one-element array.")
		}
		return nil, invalidField(param, "invalid_field", param+" must be an array of addresses.")
	}
	if required && len(list) == 0 {
		return nil, invalidField(param, "invalid_field", param+" must not be empty.")
	}
	out := make([]string, 0, len(list))
	for i, item := range list {
		addr, ok := item.(string)
		p := fmt.Sprintf("%s[%d]", param, i)
		if !ok || !validAddress(addr) {
			return nil, invalidField(p, "invalid_address", p+" is not a valid email address.")
		}
		out = append(out, addr)
	}
	return out, nil
}

func requiredAddress(m map[string]any, key, param string) (string, *apiError) {
	v, ok := m[key]
	if !ok || v == nil || v == "" {
		return "", missingField(param)
	}
	addr, ok := v.(string)
	if !ok || !validAddress(addr) {
		return "", invalidField(param, "invalid_address", param+" is not a valid email address.")
	}
	return addr, nil
}

// validAddress accepts "a@b.c" and "Name <a@b.c>".
func validAddress(s string) bool {
	_, err := mail.ParseAddress(s)
	return err == nil
}

func optionalString(m map[string]any, key, param string) (string, *apiError) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", invalidField(param, "invalid_field", param+" must be a string.")
	}
	return s, nil
}

func checkObject(m map[string]any, key, param string) *apiError {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	if _, ok := v.(map[string]any); !ok {
		return invalidField(param, "invalid_field", param+" must be a JSON object (an empty one is {}, not []).")
	}
	return nil
}

// scheduledAt reads an RFC 3339 instant. One not in the future is not an
// error: the email is simply sent now.
func scheduledAt(m map[string]any, param string) (time.Time, *apiError) {
	v, ok := m["scheduledAt"]
	if !ok || v == nil {
		return time.Time{}, nil
	}
	s, ok := v.(string)
	if !ok {
		return time.Time{}, invalidField(param, "invalid_field", param+" must be an RFC 3339 timestamp string.")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalidField(param, "invalid_field", param+" must be an RFC 3339 timestamp such as 2030-01-02T15:04:05.000Z.")
	}
	return t, nil
}

// checkAttachments checks each attachment is {"fileId"} or {"filename",
// "content" (base64)}.
func checkAttachments(m map[string]any, prefix string) *apiError {
	v, ok := m["attachments"]
	if !ok || v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return invalidField(prefix+"attachments", "invalid_field", "attachments must be an array.")
	}
	for i, item := range list {
		p := fmt.Sprintf("%sattachments[%d]", prefix, i)
		a, ok := item.(map[string]any)
		if !ok {
			return invalidField(p, "invalid_field", p+" must be an object.")
		}
		if id, _ := a["fileId"].(string); id != "" {
			continue
		}
		if name, _ := a["filename"].(string); name == "" {
			return invalidField(p+".filename", "missing_field", p+" needs a fileId, or a filename and content.")
		}
		content, _ := a["content"].(string)
		if !isBase64(content) {
			return invalidField(p+".content", "invalid_field", p+".content must be base64.")
		}
	}
	return nil
}

// isBase64 accepts the standard or URL-safe alphabet, padded or not, with
// whitespace ignored, as the SDKs do.
func isBase64(s string) bool {
	s = strings.Join(strings.Fields(s), "")
	if s == "" {
		return false
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if _, err := enc.DecodeString(s); err == nil {
			return true
		}
	}
	return false
}

// audiences reads audienceId and/or audienceIds into one list.
func audiences(m map[string]any) ([]string, *apiError) {
	var ids []string
	if v, ok := m["audienceId"]; ok && v != nil {
		id, ok := v.(string)
		if !ok || id == "" {
			return nil, invalidField("audienceId", "invalid_field", "audienceId must be a non-empty string.")
		}
		ids = append(ids, id)
	}
	if v, ok := m["audienceIds"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return nil, invalidField("audienceIds", "invalid_field", "audienceIds must be an array of strings.")
		}
		for i, item := range list {
			id, ok := item.(string)
			if !ok || id == "" {
				p := fmt.Sprintf("audienceIds[%d]", i)
				return nil, invalidField(p, "invalid_field", p+" must be a non-empty string.")
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, missingField("audienceId")
	}
	return ids, nil
}
