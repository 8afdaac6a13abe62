package unsubscribe_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/base/unsub"
	"github.com/sendonce/sendonce/internal/ops/unsubscribe"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// multipartBody is a one-click POST's body as RFC 8058 (section 3.2) says
// a mail client SHOULD send it: multipart/form-data.
func multipartBody(t *testing.T, fields map[string]string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &b
}

// TestOneClickMultipart: a one-click POST sent as multipart/form-data
// unsubscribes as an urlencoded one does (it answered 400 and
// unsubscribed nobody, and the next digest went out); a multipart body
// without the field, or with another value, changes nothing.
func TestOneClickMultipart(t *testing.T) {
	t.Parallel()
	_, ob := outboxtest.New(t)
	signer := unsub.Must("https://mail.example.test", "unsub-secret-Xq7PzR4vK9mW2sT8")
	mux := http.NewServeMux()
	mux.Handle(unsubscribe.Pattern, unsubscribe.New(ob, signer, nil, nil))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func(address, contentType string, body io.Reader) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+unsub.Path+signer.Token(address, "digest"), contentType, body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	for name, fields := range map[string]map[string]string{
		"no field":    {"other": "x"},
		"other value": {"List-Unsubscribe": "Two-Clicks"},
	} {
		ct, body := multipartBody(t, fields)
		if code, text := post("bo@example.com", ct, body); code != http.StatusBadRequest {
			t.Errorf("multipart, %s: %d %q, want 400", name, code, text)
		}
	}
	ct, body := multipartBody(t, map[string]string{"List-Unsubscribe": "One-Click"})
	if code, text := post("ada@example.com", ct, body); code != http.StatusOK {
		t.Fatalf("multipart one-click: %d %q, want 200", code, text)
	}
	if code, text := post("cy@example.com", "application/x-www-form-urlencoded",
		strings.NewReader(url.Values{"List-Unsubscribe": {"One-Click"}}.Encode())); code != http.StatusOK {
		t.Fatalf("urlencoded one-click: %d %q, want 200", code, text)
	}
	list, err := ob.Unsubscriptions(t.Context(), &outbox.UnsubscriptionParams{Topic: "digest"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range list {
		got = append(got, u.Address+" "+u.Source)
	}
	if strings.Join(got, ", ") != "ada@example.com one-click, cy@example.com one-click" {
		t.Fatalf("unsubscribed: %v, want ada and cy by one-click (not bo)", got)
	}
}
