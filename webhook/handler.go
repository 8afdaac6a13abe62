package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/status"
	"github.com/sendonce/sendonce/internal/base/store"
)

// MaxBody is the largest body a Handler reads; a larger one is refused
// with 413.
const MaxBody = 1 << 20

// Handler is an http.Handler that receives OpenEmail webhook deliveries
// and stores them (see the package documentation for what it answers).
type Handler struct {
	pool    *pgxpool.Pool
	secrets []string
	log     *slog.Logger
	now     func() time.Time
	hook    status.Hook
}

// OnStatus sets a status hook (outbox.StatusHook): the delivery
// statuses an event records (delivered, bounced, complained) are told to
// it in the transaction that stores the event, before it commits. An error
// from it rolls the event back and answers 500, so that the API delivers
// it again. Set it before the Handler serves.
func (h *Handler) OnStatus(hook status.Hook) {
	h.hook = hook
}

// New returns a Handler that stores events through pool and accepts a
// delivery signed with any of secrets (more than one while a secret is
// being rotated). It refuses an empty list and blank secrets. A nil logger
// discards the log.
func New(pool *pgxpool.Pool, secrets []string, logger *slog.Logger) (*Handler, error) {
	if pool == nil {
		return nil, errors.New("webhook: no database pool")
	}
	if len(secrets) == 0 {
		return nil, ErrNoSecret
	}
	for i, s := range secrets {
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("webhook: secret %d of %d is blank", i+1, len(secrets))
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{pool: pool, secrets: append([]string(nil), secrets...), log: logger, now: time.Now}, nil
}

// ServeHTTP verifies, parses and stores one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, r, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed: POST only")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, "cannot read the body")
		return
	}
	if len(body) > MaxBody {
		h.refuse(w, r, http.StatusRequestEntityTooLarge, "the body is over 1 MiB")
		return
	}
	if err := Verify(h.secrets, r.Header.Get(SignatureHeader), body, h.now()); err != nil {
		h.refuse(w, r, http.StatusUnauthorized, strings.TrimPrefix(err.Error(), "webhook: "))
		return
	}
	ev, err := parseEvent(body, r.Header.Get(DeliveryHeader))
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "webhook: "))
		return
	}
	stored, err := h.store(r.Context(), ev, body)
	switch {
	case errors.Is(err, errBody):
		h.refuse(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "webhook: "))
		return
	case err != nil:
		h.log.Error("webhook event not stored; the API will send it again", "error", err,
			"type", ev.Type, "event_id", ev.ID, "delivery_id", ev.DeliveryID)
		http.Error(w, "could not store the event", http.StatusInternalServerError)
		return
	}
	attrs := []any{"type", ev.Type, "event_id", ev.ID, "delivery_id", ev.DeliveryID, "email_id", deref(ev.EmailID)}
	if stored.intentID != nil { // the intent the event matched, by its key (the id's pointer printed as 0x…)
		attrs = append(attrs, "key", stored.intentKey, "intent_id", *stored.intentID)
	}
	h.log.Info("webhook event", append(attrs, "duplicate", stored.duplicate, "suppression_changes", stored.suppressed)...)
	for _, t := range stored.trips {
		h.log.Warn("run breaker tripped: run paused", "run", t.Run, "reason", t.Reason, "event_id", ev.ID)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"received": true, "duplicate": stored.duplicate})
}

// refuse answers a delivery that is not stored. reason must hold neither
// secret nor signature.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, reason string) {
	h.log.Warn("webhook refused", "status", code, "reason", reason, "remote", r.RemoteAddr)
	http.Error(w, reason, code)
}

// stored is what store did.
type stored struct {
	duplicate  bool
	intentID   *int64
	intentKey  string              // the matched intent's key, when intentID is set
	suppressed int                 // addresses the event put on (or took off) the suppression list
	trips      []store.BreakerTrip // runs the event's outcome paused (the runs' breaker)
}

// store writes the event and applies it, in one transaction: the event is
// stored once per event id, matched to the intent with its message id (if
// one is recorded yet), and the intent's delivery status updated. It
// returns an error matching errBody when the database refuses the body
// itself (JSON it cannot hold, such as a \u0000 in a string).
//
// The key is the event's id, from the signed body, not the delivery header:
// the header is not signed, and keyed by it a captured event posted again
// under a header of the poster's choice (or none) was stored and applied a
// second time (a suppression.removed undoing a later bounce).
func (h *Handler) store(ctx context.Context, ev *event, body []byte) (stored, error) {
	var st stored
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		err := store.StoreWebhookEvent(ctx, tx, ev.DeliveryID, ev.ID, ev.Type, ev.EmailID, ev.OccurredAt, string(body))
		if errors.Is(err, pgx.ErrNoRows) {
			st.duplicate = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("insert event: %w", err)
		}
		// Match first: an event without addresses of its own suppresses
		// the recipients of the intent it matched. With a status hook,
		// the delivery status it records is captured and told to it.
		apply := func() error {
			var key *string
			var err error
			st.intentID, key, st.suppressed, st.trips, err = store.ApplyWebhookEvent(ctx, tx, ev.ID)
			if err != nil {
				return fmt.Errorf("match event: %w", err)
			}
			st.intentKey = deref(key)
			return nil
		}
		if h.hook == nil {
			return apply()
		}
		statuses, err := status.Capture(ctx, tx, apply)
		if err != nil || len(statuses) == 0 {
			return err
		}
		if err := h.hook(ctx, tx, statuses); err != nil {
			return fmt.Errorf("status hook: %w", err)
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
			return st, fmt.Errorf("%w: the database cannot store it: %s", errBody, pgErr.Message)
		}
		return st, fmt.Errorf("webhook: store event %q: %w", ev.ID, err)
	}
	return st, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
