package client

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func TestBroadcastDecode(t *testing.T) {
	t.Parallel()
	body := `{"id":"br_1","status":"cancelled","audienceIds":["aud_1","aud_2"],"subject":"News","scheduledAt":"2030-01-01T09:00:00.000Z","stats":{"sent":0}}`
	api := newFakeAPI(t, respond(200, body))
	c, _ := newTestClient(t, api.URL)
	for _, call := range []func() (*Broadcast, error){
		func() (*Broadcast, error) { return c.Broadcasts.Get(context.Background(), "br_1") },
		func() (*Broadcast, error) { return c.Broadcasts.Cancel(context.Background(), "br_1") },
	} {
		b, err := call()
		if err != nil {
			t.Fatal(err)
		}
		want := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
		if b.ID != "br_1" || b.Status != BroadcastCancelled || !reflect.DeepEqual(b.AudienceIDs, []string{"aud_1", "aud_2"}) ||
			b.ScheduledAt == nil || !b.ScheduledAt.Equal(want) || string(b.Raw) != body {
			t.Errorf("got %+v", b)
		}
	}
}
