// Package unsubscribe serves the one-click unsubscribe endpoint of RFC
// 8058 on sendonce work's public listener (--webhook-addr): POST /u/TOKEN
// with the field List-Unsubscribe=One-Click (urlencoded, or
// multipart/form-data as RFC 8058 recommends) unsubscribes the token's
// address from its topic at once; GET /u/TOKEN shows a page with a button
// that makes the same POST, and changes nothing by itself (mail scanners
// follow links).
package unsubscribe

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"

	"github.com/sendonce/sendonce/internal/base/unsub"
	"github.com/sendonce/sendonce/outbox"
)

// MaxBody bounds a request's body, as the webhook receiver's does.
const MaxBody = 1 << 20

// Pattern is the route the handler serves, for an http.ServeMux.
const Pattern = unsub.Path + "{token}"

// Store is what the handler writes to: the outbox.
type Store interface {
	Unsubscribe(ctx context.Context, address, topic, source string) (bool, error)
}

// Handler serves Pattern. Make it with New.
type Handler struct {
	store   Store
	signer  *unsub.Signer
	log     *slog.Logger
	counted func(topic, source string)
}

// New returns the handler. counted, when set, is called once for each
// address newly unsubscribed, with its topic and source (the command
// counts them in sendonce_unsubscribes_total{topic,source}; a function
// rather than a Prometheus registry keeps Prometheus out of the library's
// module, whose worker tests serve this endpoint).
func New(store Store, signer *unsub.Signer, log *slog.Logger, counted func(topic, source string)) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if counted == nil {
		counted = func(string, string) {}
	}
	return &Handler{store: store, signer: signer, log: log, counted: counted}
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="robots" content="noindex"><title>Unsubscribe</title></head>
<body style="font-family:sans-serif;max-width:32rem;margin:3rem auto">
{{if .Done}}<h1>You are unsubscribed</h1><p>{{.Address}} gets no more <b>{{.Topic}}</b> email.</p>
{{else if .Bad}}<h1>This link is not valid</h1><p>It may have been cut short, or be too old. Nothing was changed.</p>
{{else}}<h1>Unsubscribe</h1><p>Stop sending <b>{{.Topic}}</b> email to {{.Address}}? Other email (receipts, account notices) still comes.</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><input type="hidden" name="via" value="page">
<button type="submit">Unsubscribe</button></form>{{end}}
</body></html>
`))

type view struct {
	Address, Topic string
	Done, Bad      bool
}

// ServeHTTP answers GET with the confirmation page and POST with the
// unsubscribe. A token no secret signed gets 400 and changes nothing.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	address, topic, err := h.signer.Verify(r.PathValue("token"))
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if err != nil {
			render(w, http.StatusBadRequest, view{Bad: true})
			return
		}
		render(w, http.StatusOK, view{Address: address, Topic: topic})
	case http.MethodPost:
		body, rerr := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if rerr != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		if len(body) > MaxBody {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err != nil {
			h.log.Info("unsubscribe: a token no secret signed", "remote", r.RemoteAddr)
			http.Error(w, "this unsubscribe link is not valid; nothing was changed", http.StatusBadRequest)
			return
		}
		form, ferr := parseForm(r.Header.Get("Content-Type"), body)
		if ferr != nil || form.Get("List-Unsubscribe") != "One-Click" {
			http.Error(w, "want the field List-Unsubscribe=One-Click, urlencoded or multipart/form-data (RFC 8058)", http.StatusBadRequest)
			return
		}
		source := outbox.UnsubscribeOneClick
		if form.Get("via") == "page" {
			source = outbox.UnsubscribePage
		}
		added, uerr := h.store.Unsubscribe(r.Context(), address, topic, source)
		if uerr != nil {
			var invalid *outbox.InvalidError
			if errors.As(uerr, &invalid) {
				http.Error(w, "this unsubscribe link is not valid; nothing was changed", http.StatusBadRequest)
				return
			}
			h.log.Error("unsubscribe failed", "topic", topic, "error", uerr)
			http.Error(w, "could not unsubscribe now; try again", http.StatusServiceUnavailable)
			return
		}
		if added {
			h.counted(topic, source)
			h.log.Info("unsubscribed", "topic", topic, "source", source)
		}
		if source == outbox.UnsubscribePage || strings.Contains(r.Header.Get("Accept"), "text/html") {
			render(w, http.StatusOK, view{Address: address, Topic: topic, Done: true})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "unsubscribed\n")
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// parseForm reads a POST's fields: multipart/form-data, which RFC 8058
// (section 3.2) says a mail client SHOULD send, or
// application/x-www-form-urlencoded, what the page's button and most
// clients send (and what a body of any other type is read as).
func parseForm(contentType string, body []byte) (url.Values, error) {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "multipart/form-data" {
		return url.ParseQuery(string(body))
	}
	if params["boundary"] == "" {
		return nil, errors.New("multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	form := url.Values{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return form, nil
		}
		if err != nil {
			return nil, err
		}
		if part.FormName() == "" || part.FileName() != "" {
			continue // not a field: a file, or a part without a name
		}
		v, err := io.ReadAll(part) // bounded by the body, at most MaxBody
		if err != nil {
			return nil, err
		}
		form.Add(part.FormName(), strings.TrimRight(string(v), "\r\n"))
	}
}

func render(w http.ResponseWriter, code int, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	w.WriteHeader(code)
	_ = page.Execute(w, v)
}
