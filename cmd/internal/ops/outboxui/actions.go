package outboxui

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// confirmData is the page that asks before an action, or says why it was
// refused.
type confirmData struct {
	Action   string // "retry" or "cancel"
	Rec      *outbox.Record
	Notes    []string // what the operator should know before going on
	Refusal  string   // why the action was refused; "" when it may go on
	CanForce bool     // the refusal can be overridden with force
	CanGo    bool     // the form to go on is shown
}

func (h *Handler) confirmRetry(w http.ResponseWriter, r *http.Request) {
	h.confirm(w, r, "retry", http.StatusOK, nil)
}

func (h *Handler) confirmCancel(w http.ResponseWriter, r *http.Request) {
	h.confirm(w, r, "cancel", http.StatusOK, nil)
}

// confirm shows the confirmation of action on the intent the request names,
// with refused as the reason when an attempt was just refused.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, action string, code int, refused error) {
	if !h.opts.Actions {
		h.fail(w, r, http.StatusForbidden, "Read-only", errReadOnly)
		return
	}
	key := r.FormValue("key")
	rec, err := h.ob.Get(r.Context(), key)
	if errors.Is(err, outbox.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "No such intent", fmt.Errorf("no intent has the key %q", key))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cannot read the intent", err)
		return
	}
	d := &confirmData{Action: action, Rec: rec}
	switch action {
	case "retry":
		d.CanGo = rec.State == outbox.StateFailed || rec.State == outbox.StateSuppressed
		if !d.CanGo {
			d.Refusal = "Only a failed or suppressed intent can be retried; this one is " + string(rec.State) + "."
		}
		if rec.State == outbox.StateSuppressed {
			d.Notes = append(d.Notes, "It was not sent because its recipients are on the suppression list. "+
				"A retry looks the list up again: take them off it first (sendonce suppression remove), "+
				"or the retry is refused.")
		}
		expired := rec.Uncertain && rec.FirstAttemptAt != nil && time.Since(*rec.FirstAttemptAt) >= h.opts.ReplayWindow
		if d.CanGo && rec.Uncertain && !expired {
			d.Notes = append(d.Notes, uncertainNote(rec.Key))
		}
		if d.CanGo && expired {
			d.Notes = append(d.Notes, fmt.Sprintf("An attempt may have reached the API, and the %s replay window from its first attempt has passed: "+
				"the retry will be refused unless you force it.", h.opts.ReplayWindow))
		}
		if d.CanGo && rec.Uncertain && rec.BatchKey != "" {
			d.Notes = append(d.Notes, fmt.Sprintf("It went out in batch %s: while the replay window lasts, the batch is sent again whole, "+
				"same body and key, with every member that failed with it.", rec.BatchKey))
		}
		if d.CanGo && !rec.Uncertain {
			d.Notes = append(d.Notes, "No attempt of it can have reached the API (each was answered with an error): "+
				"a retry sends it, with the same key. Fix the cause first.")
		}
	case "cancel":
		d.CanGo = rec.Cancelable()
		switch {
		case !d.CanGo:
			d.Refusal = rec.CancelRefusal() + "."
		case rec.Attempts > 0:
			d.Notes = append(d.Notes, fmt.Sprintf("%d send attempt(s) already made, none of which can have reached the API "+
				"(each failed before the request left, as a refused connection does, or was answered with a 429).", rec.Attempts))
		}
	}
	var se *outbox.StateError
	if refused != nil {
		d.Notes = nil
		d.Refusal = refused.Error()
		if errors.As(refused, &se) {
			d.Refusal = se.Reason
		}
		d.CanForce = errors.Is(refused, outbox.ErrMayDeliverTwice)
		d.CanGo = false
	}
	h.render(w, r, code, "confirm", action+" "+rec.Key, d)
}

func (h *Handler) retry(w http.ResponseWriter, r *http.Request) {
	if !h.checkForm(w, r) {
		return
	}
	key := r.PostFormValue("key")
	force := r.PostFormValue("force") == "yes"
	rec, err := h.ob.Retry(r.Context(), key, &outbox.RetryOptions{Force: force, ReplayWindow: h.opts.ReplayWindow})
	var se *outbox.StateError
	switch {
	case errors.As(err, &se):
		h.log.Info("outbox page: retry refused", "key", key, "who", who(r), "at", time.Now().UTC(), "reason", se.Reason)
		h.confirm(w, r, "retry", http.StatusConflict, err)
		return
	case errors.Is(err, outbox.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such intent", fmt.Errorf("no intent has the key %q", key))
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "Retry failed", err)
		return
	}
	note := "retried"
	if force {
		note = "forced"
		h.log.Warn("outbox page: retried with force: if an earlier attempt reached the API, the intent may be delivered a second time",
			"key", rec.Key, "who", who(r), "at", time.Now().UTC(), "forced_retry_at", rec.ForcedRetryAt)
	} else {
		h.log.Info("outbox page: retried", "key", rec.Key, "who", who(r), "at", time.Now().UTC(), "uncertain", rec.Uncertain)
	}
	http.Redirect(w, r, intentURL(rec.Key)+"&done="+note, http.StatusSeeOther)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	if !h.checkForm(w, r) {
		return
	}
	key := r.PostFormValue("key")
	rec, err := h.ob.Cancel(r.Context(), key)
	var se *outbox.StateError
	switch {
	case errors.As(err, &se):
		h.log.Info("outbox page: cancel refused", "key", key, "who", who(r), "at", time.Now().UTC(), "reason", se.Reason)
		h.confirm(w, r, "cancel", http.StatusConflict, err)
		return
	case errors.Is(err, outbox.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such intent", fmt.Errorf("no intent has the key %q", key))
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "Cancel failed", err)
		return
	}
	h.log.Info("outbox page: canceled", "key", rec.Key, "who", who(r), "at", time.Now().UTC())
	http.Redirect(w, r, intentURL(rec.Key)+"&done=canceled", http.StatusSeeOther)
}
