package outboxui

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/ops/httpserver"
	"github.com/sendonce/sendonce/outbox"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the page is mounted.
const Prefix = httpserver.OutboxPrefix

// Options configure the page. Every field is optional.
type Options struct {
	// Actions enables retry and cancel; without it the page only reads.
	Actions bool
	// ReplayWindow is the workers' replay window, which decides whether a
	// retry could deliver twice (default outbox.DefaultReplayWindow).
	ReplayWindow time.Duration
	// RiverUI is where the River UI is mounted, for links to an intent's
	// job; empty leaves the links out.
	RiverUI string
	// Logger receives one line per action taken (default slog.Default()).
	Logger *slog.Logger
	// WebhookAddr is where this process takes the API's delivery webhooks
	// (sendonce work --webhook-addr); empty when it takes none. The
	// overview says which, so that zeros under delivery status read right.
	WebhookAddr string
	// MaxAttempts is the workers' --max-attempts (worker.SendConfig's), for
	// the attempts a retrying intent has left, and the maximum an intent's
	// tries are shown against (never a River job's own max_attempts, a
	// ceiling above it the worker never reaches); 0 leaves them out.
	MaxAttempts int
}

// Handler serves the outbox page. Make it with New.
type Handler struct {
	ob    *outbox.Outbox
	pool  *pgxpool.Pool
	opts  Options
	log   *slog.Logger
	csrf  string
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New returns the page for ob, whose pool is pool (the page reads the
// budget and the workers beside the outbox).
func New(pool *pgxpool.Pool, ob *outbox.Outbox, opts Options) (*Handler, error) {
	if opts.ReplayWindow <= 0 {
		opts.ReplayWindow = outbox.DefaultReplayWindow
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("outboxui: form token: %w", err)
	}
	h := &Handler{ob: ob, pool: pool, opts: opts, log: opts.Logger,
		csrf: base64.RawURLEncoding.EncodeToString(secret), pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	for _, page := range []string{"overview", "list", "intent", "confirm", "message"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("outboxui: template %s: %w", page, err)
		}
		h.pages[page] = t
	}
	static, _ := fs.Sub(staticFS, "static")
	h.mux.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET "+Prefix+"/{$}", h.overview)
	h.mux.HandleFunc("GET "+Prefix+"/intents", h.list)
	h.mux.HandleFunc("GET "+Prefix+"/intent", h.intent)
	h.mux.HandleFunc("GET "+Prefix+"/retry", h.confirmRetry)
	h.mux.HandleFunc("POST "+Prefix+"/retry", h.retry)
	h.mux.HandleFunc("GET "+Prefix+"/cancel", h.confirmCancel)
	h.mux.HandleFunc("POST "+Prefix+"/cancel", h.cancel)
	return h, nil
}

// ServeHTTP serves a request under Prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// No script runs on these pages, whatever an intent holds.
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	Actions bool
	CSRF    string
	Who     string
	RiverUI string
	Data    any
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	var buf bytes.Buffer
	p := page{Title: title, Nav: name, Actions: h.opts.Actions, CSRF: h.csrf, Who: who(r), RiverUI: h.opts.RiverUI, Data: data}
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.log.Error("outbox page: render", "page", name, "error", err)
		http.Error(w, "outbox page: cannot render "+name, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// message is a page that says one thing, such as an error.
type message struct {
	Heading string
	Text    string
	Back    string // a link back, under Prefix
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, heading string, err error) {
	if code >= 500 {
		h.log.Error("outbox page: "+heading, "path", r.URL.Path, "error", err)
	}
	h.render(w, r, code, "message", heading, message{Heading: heading, Text: err.Error(), Back: Prefix + "/"})
}

// checkForm refuses a POST that the page did not make: actions off, or
// the form token missing or wrong.
func (h *Handler) checkForm(w http.ResponseWriter, r *http.Request) bool {
	if !h.opts.Actions {
		h.fail(w, r, http.StatusForbidden, "Read-only", errReadOnly)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	got := r.PostFormValue("csrf")
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.csrf)) != 1 {
		h.fail(w, r, http.StatusForbidden, "Refused", errors.New(
			"the form token is missing or wrong: submit the form from this page (reload it first if the worker restarted)"))
		return false
	}
	return true
}

var errReadOnly = errors.New("the outbox page is read-only: start sendonce work with --ui-actions (or SENDONCE_UI_ACTIONS=true) to retry and cancel from it")

// who names the operator for the log: the token's name, or what let them in.
func who(r *http.Request) string {
	if w := httpserver.Who(r.Context()); w != "" {
		return w
	}
	return "anyone on loopback (no UI token)"
}

// intentURL is the intent page's address.
func intentURL(key string) string { return Prefix + "/intent?key=" + url.QueryEscape(key) }
