package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header names of a webhook delivery.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex>[,v1=<hex>…]".
	SignatureHeader = "X-OpenEmail-Signature"
	// EventHeader carries the event's type (informational: the signed body's
	// type is the one used).
	EventHeader = "X-OpenEmail-Event"
	// DeliveryHeader carries the delivery's id, the same on every retry of
	// one delivery.
	DeliveryHeader = "X-OpenEmail-Delivery"
)

// Tolerance is how far a signature's timestamp may be from now, in either
// direction.
const Tolerance = 300 * time.Second

// The reasons Verify refuses a delivery. None of them carries the
// signature or the secret.
var (
	ErrNoSignature        = errors.New("webhook: no signature header")
	ErrMalformedSignature = errors.New("webhook: malformed signature header")
	ErrStale              = errors.New("webhook: signature timestamp outside the 5-minute tolerance")
	ErrMismatch           = errors.New("webhook: no signature matches")
	ErrNoSecret           = errors.New("webhook: no secret to verify with")
)

// Verify checks a delivery's signature header against its raw body, as
// the official SDKs do: the header is "t=<unix seconds>,v1=<hex>", pairs
// split on "," and each at its first "=", keys and values trimmed; the
// last t is the timestamp and every non-empty v1 a candidate. The
// timestamp must be within Tolerance of now, in either direction, and that
// is checked first. The expected signature is the lowercase hex
// HMAC-SHA256, keyed with the secret's raw bytes, of "<t>.<body>" with t
// written as a decimal integer; it is compared in constant time with every
// candidate, for every secret (several during a rotation), and any match
// passes. Blank secrets are ignored.
func Verify(secrets []string, header string, body []byte, now time.Time) error {
	header = strings.TrimSpace(header)
	if header == "" {
		return ErrNoSignature
	}
	var (
		ts     int64
		haveTS bool
		sigs   []string
	)
	for pair := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			ts, haveTS = n, err == nil
		case "v1":
			if v != "" {
				sigs = append(sigs, v)
			}
		}
	}
	if !haveTS || len(sigs) == 0 {
		return ErrMalformedSignature
	}
	if d := now.Unix() - ts; d > int64(Tolerance/time.Second) || d < -int64(Tolerance/time.Second) {
		return ErrStale
	}
	prefix := strconv.FormatInt(ts, 10) + "."
	tried := false
	for _, secret := range secrets {
		if strings.TrimSpace(secret) == "" {
			continue
		}
		tried = true
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(prefix))
		mac.Write(body)
		want := []byte(hex.EncodeToString(mac.Sum(nil)))
		for _, sig := range sigs {
			if hmac.Equal(want, []byte(sig)) {
				return nil
			}
		}
	}
	if !tried {
		return ErrNoSecret
	}
	return ErrMismatch
}

// Sign returns a signature header for body at time t with secret, as the
// API sends it: for tests, and for tools that replay events.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
