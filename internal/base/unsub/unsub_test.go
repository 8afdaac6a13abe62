package unsub

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	secretA = "secret-A-LEAKCHECK-0123456789"
	secretB = "secret-B-LEAKCHECK-9876543210"
)

// TestTokens: a token verifies to its address and topic; a change of
// either, of a byte of the signature, or another secret's token, does
// not; after a rotation the previous secret's tokens still verify, and
// once it is dropped they do not.
func TestTokens(t *testing.T) {
	old := Must("https://mail.example.com", secretA)
	tok := old.Token("ada@example.com", "digest")
	if a, tp, err := old.Verify(tok); err != nil || a != "ada@example.com" || tp != "digest" {
		t.Fatalf("Verify = %q, %q, %v", a, tp, err)
	}
	body, sig, _ := strings.Cut(tok, ".")
	bo := strings.SplitN(old.Token("bo@example.com", "digest"), ".", 2)[0]
	news := strings.SplitN(old.Token("ada@example.com", "news"), ".", 2)[0]
	flipped := []byte(sig)
	flipped[3] ^= 1
	if flipped[3] == sig[3] || !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", rune(flipped[3])) {
		flipped[3] = 'A'
	}
	for name, bad := range map[string]string{
		"other address": bo + "." + sig, "other topic": news + "." + sig, "flipped": body + "." + string(flipped),
		"no signature": body, "empty": "", "garbage": "%%%.%%%", "other secret": Must("https://x.test", secretB).Token("ada@example.com", "digest"),
	} {
		if _, _, err := old.Verify(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: Verify = %v, want ErrBadToken", name, err)
		}
	}
	rotated := Must("https://mail.example.com", secretB, secretA)
	if a, _, err := rotated.Verify(tok); err != nil || a != "ada@example.com" {
		t.Errorf("the previous secret's token after rotation: %q, %v", a, err)
	}
	if tok2 := rotated.Token("ada@example.com", "digest"); tok2 == tok {
		t.Error("the rotated signer signs with the previous secret")
	}
	if _, _, err := Must("https://mail.example.com", secretB).Verify(tok); !errors.Is(err, ErrBadToken) {
		t.Errorf("a dropped secret's token: %v, want ErrBadToken", err)
	}
}

// TestHeadersAndMerge: the headers as sent, merged over the email's own.
func TestHeadersAndMerge(t *testing.T) {
	s, err := New("https://mail.example.com/", "unsubscribe@example.com", secretA)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Headers("ada@example.com", "digest")
	tok := s.Token("ada@example.com", "digest")
	if want := "<https://mail.example.com/u/" + tok + ">, <mailto:unsubscribe@example.com?subject=unsubscribe%20" + tok + ">"; h[HeaderList] != want {
		t.Errorf("List-Unsubscribe %q, want %q", h[HeaderList], want)
	}
	if h[HeaderPost] != "List-Unsubscribe=One-Click" {
		t.Errorf("List-Unsubscribe-Post %q", h[HeaderPost])
	}
	frozen, err := s.Freeze("email", json.RawMessage(`{"to":["Ada <ADA@example.com>"],"headers":{"list-unsubscribe":"<x>","X-A":"1"}}`), "digest", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Attach("email", json.RawMessage(`{"to":["Ada <ADA@example.com>"],"headers":{"list-unsubscribe":"<x>","X-A":"1"}}`), frozen)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Headers map[string]string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Headers) != 3 || got.Headers["X-A"] != "1" || got.Headers[HeaderList] != h[HeaderList] {
		t.Errorf("merged headers %v", got.Headers)
	}
	for _, v := range []any{s, *s} {
		if p := fmt.Sprintf("%v %+v %#v %s", v, v, v, v); strings.Contains(p, "LEAKCHECK") {
			t.Errorf("the secret is printed: %s", p)
		}
	}
	for _, bad := range []string{"http://mail.example.com", "mail.example.com", "https://u:p@mail.example.com", "https://mail.example.com/?a=1"} {
		if _, err := New(bad, "", secretA); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	if _, err := New("https://mail.example.com", "", "LEAKCHECK"); err == nil || strings.Contains(err.Error(), "LEAKCHECK") {
		t.Errorf("a short secret: %v", err)
	}
}
