package fakeapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sendonce/sendonce/fakeapi"
)

// post sends one JSON send with an API key, an Idempotency-Key and, if not
// empty, an X-Fake-Fault rule.
func post(url, key, fault, body string) (int, map[string]any) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer oe_test_example")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if fault != "" {
		req.Header.Set("X-Fake-Fault", fault)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var answer map[string]any
	json.NewDecoder(resp.Body).Decode(&answer)
	return resp.StatusCode, answer
}

// A retried send replays: the second request with the same key and body is
// answered with the same message, marked replayed, and the ledger holds one
// delivery.
func Example() {
	srv := fakeapi.New(fakeapi.Config{})
	defer srv.Close()
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}

	body := `{"from":"billing@example.com","to":["ann@example.com"],"subject":"Invoice","text":"Attached."}`
	_, first := post(url+"/emails", "invoice:inv_4192", "", body)
	_, again := post(url+"/emails", "invoice:inv_4192", "", body)

	fmt.Println("first replayed:", first["replayed"])
	fmt.Println("retry replayed:", again["replayed"], "same id:", again["id"] == first["id"])
	fmt.Println("deliveries to ann:", len(srv.DeliveriesTo("ann@example.com")))
	// Output:
	// first replayed: false
	// retry replayed: true same id: true
	// deliveries to ann: 1
}

// A test scripts a flaky API with a header: the first two attempts of each
// keyed send fail with 503 before anything is sent, the third succeeds.
func Example_faultHeader() {
	srv := fakeapi.New(fakeapi.Config{})
	defer srv.Close()
	url, _ := srv.Start("127.0.0.1:0")

	body := `{"from":"billing@example.com","to":["ann@example.com"],"text":"Attached."}`
	for range 3 {
		status, _ := post(url+"/emails", "invoice:1", "error_before=503;times=2", body)
		fmt.Println(status, len(srv.Deliveries()))
	}
	// Output:
	// 503 0
	// 503 0
	// 200 1
}

func ExampleParseFault() {
	f, err := fakeapi.ParseFault("error_before:times=2:to=flaky@")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Kind, f.Status, f.Times, f.To)
	fmt.Println(f)
	// Output:
	// error_before 503 2 flaky@
	// error_before=503;times=2;to=flaky@
}
