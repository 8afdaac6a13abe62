package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// The system test's webhooks: every signed event that reaches a worker
// goes through hookProxy, which records it with the answer; the fake's own
// events (email.delivered, and during a "bounces" episode email.bounced and
// email.complained, some posted twice, late or out of order) and the ones
// the schedule makes up and signs itself (bounces and complaints of
// delivered messages, soft bounces, suppression.added and .removed, a
// captured event posted again under another delivery header or none, and
// two events of one address posted against the order of their own times).
// The model reads the records (system_model_test.go): the suppression list
// is what the events' own times and the changes by hand make of it, each
// event applied once, and each intent's delivery status what its messages'
// events say.

// webhookPath is where `sendonce work --webhook-addr` takes deliveries.
const webhookPath = "/webhooks/openemail"

// hookPost is one POST of an event to a worker, as the proxy made it.
type hookPost struct {
	Source    string // "fake", or "#N" for the schedule's operation N
	EventID   string
	Type      string
	EmailID   string
	Delivery  string // the X-OpenEmail-Delivery header sent; "" when none
	Body      []byte
	sig       string    // the signature header, for a replay; never logged
	Created   time.Time // the event's own time (createdAt); zero when it has none
	Addrs     []string  // the canonical addresses the event names
	Soft      bool      // a bounce the event calls soft, transient or temporary
	Start     time.Time
	End       time.Time
	Status    int // the answer's status; 502 when the worker went away under it
	Duplicate bool
	Answer    string
}

// outcome is what the answer proved: stored (2xx, after the commit),
// uncertain (a 500, which a commit lost under a restart also gives, or the
// connection gone), or refused (4xx, or no worker took it).
func (p *hookPost) outcome() sysOutcome {
	switch {
	case p.Status >= 200 && p.Status < 300:
		return outYes
	case p.Status == http.StatusInternalServerError || p.Status == http.StatusBadGateway || p.Status == 0:
		return outUncertain
	}
	return outNo
}

func (p *hookPost) String() string {
	d := p.Delivery
	if d == "" {
		d = "(none)"
	}
	soft := ""
	if p.Soft {
		soft = " soft"
	}
	return fmt.Sprintf("%s %s %s%s at %s email=%q to=%v delivery=%s [%s..%s] => %d duplicate=%v",
		p.Source, p.EventID, p.Type, soft, p.Created.Format("15:04:05.000"), p.EmailID, p.Addrs, d,
		p.Start.Format("15:04:05.000"), p.End.Format("15:04:05.000"), p.Status, p.Duplicate)
}

// parse reads what the model needs of the event: its id, type, time, the
// message and the addresses it names (data.to, a string or an array, and
// data.email, data.address, data.recipient), and whether a bounce is soft.
func (p *hookPost) parse() {
	var top struct {
		ID        string                     `json:"id"`
		Type      string                     `json:"type"`
		CreatedAt string                     `json:"createdAt"`
		Data      map[string]json.RawMessage `json:"data"`
	}
	if json.Unmarshal(p.Body, &top) != nil {
		return
	}
	p.EventID, p.Type = top.ID, top.Type
	if t, err := time.Parse(time.RFC3339Nano, top.CreatedAt); err == nil {
		p.Created = t
	}
	str := func(raw json.RawMessage) (string, bool) {
		var s string
		return s, json.Unmarshal(raw, &s) == nil
	}
	p.EmailID, _ = str(top.Data["emailId"])
	var forms []string
	if raw, ok := top.Data["to"]; ok {
		if s, ok := str(raw); ok {
			forms = append(forms, s)
		} else {
			var list []string
			_ = json.Unmarshal(raw, &list)
			forms = append(forms, list...)
		}
	}
	for _, f := range []string{"email", "address", "recipient"} {
		if s, ok := str(top.Data[f]); ok {
			forms = append(forms, s)
		}
	}
	for _, f := range forms {
		// A form sendonce refuses names no address (webhook/doc.go).
		if a, ok := spelled(f); ok && strings.Contains(a, "@") && !slices.Contains(p.Addrs, a) {
			p.Addrs = append(p.Addrs, a)
		}
	}
	slices.Sort(p.Addrs)
	var bounce struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(top.Data["bounce"], &bounce)
	for _, s := range []string{bounce.Type, unquote(top.Data["bounceType"]), unquote(top.Data["bounce_type"])} {
		switch strings.ToLower(s) {
		case "soft", "transient", "temporary":
			p.Soft = true
		}
	}
}

func unquote(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// hookProxy takes the fake's webhook events and hands each to a live
// worker's --webhook-addr listener, so a killed worker does not lose them,
// and records every post with its answer; the schedule's own events go
// the same way (post).
type hookProxy struct {
	mu     sync.Mutex
	live   map[string]bool
	addrs  []string
	next   atomic.Uint64
	srv    *http.Server
	client *http.Client
	posts  []*hookPost
}

func newHookProxy() *hookProxy {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // 127.0.0.1 only, whatever the environment says
	return &hookProxy{live: map[string]bool{}, client: &http.Client{Transport: transport, Timeout: 15 * time.Second}}
}

func (h *hookProxy) set(addr string, live bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live[addr] = live
}

// all returns every post recorded so far.
func (h *hookProxy) all() []*hookPost {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.posts)
}

func (h *hookProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 2<<20))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	p := h.post(req.Context(), "fake", body, req.Header)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(p.Status)
	_, _ = io.WriteString(w, p.Answer)
}

// post forwards one event, with the webhook headers of hdr (a header hdr
// lacks is not sent), to the next live worker, and records it.
func (h *hookProxy) post(ctx context.Context, source string, body []byte, hdr http.Header) *hookPost {
	p := &hookPost{Source: source, Body: body, Delivery: hdr.Get(fakeapi.HeaderWebhookDelivery),
		sig: hdr.Get(fakeapi.HeaderWebhookSignature), Start: time.Now()}
	p.parse()
	h.mu.Lock()
	var live []string
	for _, a := range h.addrs {
		if h.live[a] {
			live = append(live, a)
		}
	}
	h.mu.Unlock()
	if len(live) == 0 {
		p.Status, p.Answer = http.StatusServiceUnavailable, "no worker takes webhooks now"
	} else {
		target := live[int(h.next.Add(1))%len(live)]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+target+webhookPath, bytes.NewReader(body))
		if err == nil {
			for _, k := range []string{"Content-Type", fakeapi.HeaderWebhookSignature, fakeapi.HeaderWebhookEvent, fakeapi.HeaderWebhookDelivery} {
				if v := hdr.Get(k); v != "" {
					req.Header.Set(k, v)
				}
			}
			var resp *http.Response
			if resp, err = h.client.Do(req); err == nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				p.Status, p.Answer = resp.StatusCode, string(b)
				var ans struct {
					Duplicate bool `json:"duplicate"`
				}
				if json.Unmarshal(b, &ans) == nil {
					p.Duplicate = ans.Duplicate
				}
			}
		}
		if err != nil {
			p.Status, p.Answer = http.StatusBadGateway, err.Error()
		}
	}
	p.End = time.Now()
	h.mu.Lock()
	h.posts = append(h.posts, p)
	h.mu.Unlock()
	return p
}

// eventTime is how an event writes its time: the fake's form, milliseconds
// in UTC, so the stored time is exactly the one the model holds.
const eventTime = "2006-01-02T15:04:05.000Z"

// newEvent makes up a signed event of the schedule's own, created at at:
// its body and the headers it goes with.
func (r *sysRunner) newEvent(typ string, at time.Time, data map[string]any) ([]byte, http.Header) {
	r.nEvents++
	body := mustJSON(map[string]any{
		"id":        fmt.Sprintf("evt_sys%d_%04d", r.seed, r.nEvents),
		"type":      typ,
		"createdAt": at.UTC().Format(eventTime),
		"data":      data,
	})
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set(fakeapi.HeaderWebhookEvent, typ)
	hdr.Set(fakeapi.HeaderWebhookDelivery, fmt.Sprintf("whd_sys%d_%04d", r.seed, r.nEvents))
	hdr.Set(fakeapi.HeaderWebhookSignature, fakeapi.SignWebhook(webhookSecret, time.Now().Unix(), body))
	return body, hdr
}

// postEvent posts an event for operation op and notes the answer on it.
func (r *sysRunner) postEvent(op *sysOp, body []byte, hdr http.Header) *hookPost {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p := r.hooks.post(ctx, fmt.Sprintf("#%d", op.Seq), body, hdr)
	for _, a := range p.Addrs {
		if !slices.Contains(op.Addrs, a) {
			op.Addrs = append(op.Addrs, a)
		}
	}
	// The answer goes in the detail: the operation's result is its own.
	op.Detail += fmt.Sprintf(" [%s %s at %s to=%v: %d duplicate=%v]", p.EventID, p.Type, p.Created.Format("15:04:05.000"), p.Addrs, p.Status, p.Duplicate)
	return p
}

// eventNow is the time an event made up now carries: the wall clock, to the
// millisecond the event writes.
func eventNow() time.Time { return time.Now().Round(0).Truncate(time.Millisecond) }

// pickDelivery draws a delivered email (not a broadcast: they make no
// events), a batch-kind intent's one with batch set when there is one.
func (r *sysRunner) pickDelivery(batch bool) (fakeapi.Delivery, string, bool) {
	var all, batches []fakeapi.Delivery
	for _, d := range r.srv.Deliveries() {
		if d.Kind == fakeapi.KindBroadcast {
			continue
		}
		all = append(all, d)
		cause, _ := causeOf(d)
		if in := r.m.intents[keyOfCause(cause)]; in != nil && in.Kind == outbox.KindBatch {
			batches = append(batches, d)
		}
	}
	if batch && len(batches) > 0 {
		all = batches
	}
	if len(all) == 0 {
		return fakeapi.Delivery{}, "", false
	}
	// The recent ones more often: their intents are still in the outbox.
	u := r.rng.Float64()
	d := all[len(all)-1-int(u*u*float64(len(all)))]
	cause, _ := causeOf(d)
	return d, keyOfCause(cause), true
}

// opBounce posts what the API says of a delivered message later: a hard
// bounce, a soft one (no suppression), or a complaint, sometimes of one
// email of a batch-kind intent.
func (r *sysRunner) opBounce() {
	d, key, ok := r.pickDelivery(r.rng.IntN(3) == 0)
	if !ok {
		return
	}
	typ, kind := fakeapi.EventBounced, "hook-bounce"
	data := map[string]any{"emailId": d.MessageID, "to": d.To}
	switch x := r.rng.IntN(10); {
	case x < 3:
		kind = "hook-soft-bounce"
		if r.rng.IntN(2) == 0 {
			data["bounce"] = map[string]any{"type": "soft"}
		} else {
			data["bounceType"] = "transient"
		}
	case x < 5:
		typ, kind = fakeapi.EventComplained, "hook-complain"
	}
	op := r.begin(kind, fmt.Sprintf("of %s (%s, delivered %s)", d.MessageID, key, d.DeliveredAt.Format("15:04:05.000")))
	op.Keys = []string{key}
	body, hdr := r.newEvent(typ, eventNow(), data)
	r.postEvent(op, body, hdr)
	r.end(op, outYes, nil)
}

// opSuppressionEvent posts the API's suppression.added or
// suppression.removed of an address of the pool in a drawn form.
func (r *sysRunner) opSuppressionEvent(removed bool) {
	form := sysForm(r.rng, r.pickName(removed))
	typ, kind := "suppression.added", "hook-suppression-added"
	if removed {
		typ, kind = "suppression.removed", "hook-suppression-removed"
	}
	data := map[string]any{"email": form}
	if r.rng.IntN(2) == 0 {
		data = map[string]any{"to": []string{form}}
	}
	op := r.begin(kind, fmt.Sprintf("%q", form))
	body, hdr := r.newEvent(typ, eventNow(), data)
	r.postEvent(op, body, hdr)
	r.end(op, outYes, nil)
}

// opReplay posts a stored event again, byte for byte with its signature,
// under another X-OpenEmail-Delivery header or none (hole 8's shape: the
// header is not signed). It must be answered as the event already stored,
// and change nothing.
func (r *sysRunner) opReplay() {
	var stored []*hookPost
	for _, p := range r.hooks.all() {
		// Within the signature's 300 s, with some margin.
		if p.outcome() == outYes && p.sig != "" && time.Since(p.Start) < 200*time.Second {
			stored = append(stored, p)
		}
	}
	if len(stored) == 0 {
		return
	}
	p := stored[r.rng.IntN(len(stored))]
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set(fakeapi.HeaderWebhookEvent, p.Type)
	hdr.Set(fakeapi.HeaderWebhookSignature, p.sig)
	header := "none"
	if r.rng.IntN(2) == 0 {
		r.nEvents++
		header = fmt.Sprintf("whd_replay%d_%04d", r.seed, r.nEvents)
		hdr.Set(fakeapi.HeaderWebhookDelivery, header)
	}
	op := r.begin("hook-replay", fmt.Sprintf("%s (%s, first posted by %s under %q) under delivery header %s", p.EventID, p.Type, p.Source, p.Delivery, header))
	r.postEvent(op, p.Body, hdr)
	r.end(op, outYes, nil)
}

// opOutOfOrder posts two events of one address against the order of their
// own times (hole 7's shape): a bounce, then a suppression.removed from
// before it (the address must stay on the list), or a suppression.removed,
// then a bounce from before it (it must stay off).
func (r *sysRunner) opOutOfOrder() {
	name := sysNames[r.rng.IntN(len(sysNames))]
	form := sysForm(r.rng, name)
	newer := eventNow()
	older := newer.Add(-time.Duration(200+r.rng.IntN(2800)) * time.Millisecond)
	bounceFirst := r.rng.IntN(2) == 0
	kind := "hook-late-removal"
	if !bounceFirst {
		kind = "hook-late-bounce"
	}
	op := r.begin(kind, fmt.Sprintf("%q: newer event at %s first, then one from %s", form, newer.Format("15:04:05.000"), older.Format("15:04:05.000")))
	bounce := map[string]any{"to": []string{form}}
	if bounceFirst {
		// The bounce of a message really sent there, when there is one.
		for _, d := range slices.Backward(r.srv.Deliveries()) {
			if d.Kind != fakeapi.KindBroadcast && slices.ContainsFunc(d.To, func(a string) bool { return canonical(a) == canonical(form) }) {
				bounce["emailId"], bounce["to"] = d.MessageID, d.To
				cause, _ := causeOf(d)
				op.Keys = []string{keyOfCause(cause)}
				break
			}
		}
		body, hdr := r.newEvent(fakeapi.EventBounced, newer, bounce)
		r.postEvent(op, body, hdr)
		body, hdr = r.newEvent("suppression.removed", older, map[string]any{"email": form})
		r.postEvent(op, body, hdr)
	} else {
		body, hdr := r.newEvent("suppression.removed", newer, map[string]any{"email": form})
		r.postEvent(op, body, hdr)
		body, hdr = r.newEvent(fakeapi.EventBounced, older, bounce)
		r.postEvent(op, body, hdr)
	}
	r.end(op, outYes, nil)
}

// bouncesEpisode is a fault episode of the fake's event rules: some
// deliveries' events are bounces or complaints, and some events are posted
// twice, held back behind later ones, delayed, or signed wrong.
func bouncesEpisode() *sysEpisode {
	return &sysEpisode{name: "bounces", rules: []string{
		"bounce;p=0.15", "complain;p=0.05",
		"webhook_duplicate;p=0.3", "webhook_out_of_order=2;p=0.3", "webhook_delay=1500ms;p=0.2", "webhook_bad_signature;p=0.05",
	}}
}
