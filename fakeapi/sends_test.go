package fakeapi_test

import (
	"net/http"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestTemplateSend(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	body := map[string]any{"from": "shop@example.com", "to": []string{"ann@example.com"}, "props": map[string]any{"name": "Ann"}}
	r := do(t, url, http.MethodPost, "/templates/welcome%2Fv2/send", body, headers("Idempotency-Key", "welcome:ann"))
	wantStatus(t, r, http.StatusOK)
	if r.body["templateId"] != "welcome/v2" || r.body["replayed"] != false {
		t.Fatalf("template send answered %s", r.raw)
	}
	if ds := srv.Deliveries(); len(ds) != 1 || ds[0].Kind != fakeapi.KindTemplate || ds[0].TemplateID != "welcome/v2" {
		t.Fatalf("deliveries %+v", ds)
	}
}
