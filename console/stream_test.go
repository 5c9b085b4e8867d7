package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/musterhq/muster/internal/testkit/ssetest"
)

// firstEvent opens the event stream at url (with Last-Event-ID lastID if
// not empty) and returns its first event.
func firstEvent(t *testing.T, url, lastID string) ssetest.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	h := http.Header{}
	if lastID != "" {
		h.Set("Last-Event-ID", lastID)
	}
	return ssetest.First(ctx, t, url, h, "")
}

func TestConsoleEventStreamResumesFromLastEventID(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", map[string]string{"k": "v"}))
	for _, url := range []string{f.url + "api/service/events?name=payments", f.url + "api/services/events"} {
		ev := firstEvent(t, url, "")
		if ev.Name != "state" || ev.ID == "" {
			t.Fatalf("%s: first event %+v, want a state with an id", url, ev)
		}
		again := firstEvent(t, url, ev.ID)
		if again.Name != "resumed" || again.ID != ev.ID {
			t.Errorf("%s: after Last-Event-ID %s, first event %+v, want resumed", url, ev.ID, again)
		}
		older := firstEvent(t, url, "1")
		if older.Name != "state" {
			t.Errorf("%s: after Last-Event-ID 1, first event %+v, want the state", url, older)
		}
	}
	var st struct {
		Instances []struct {
			ID           string
			LeaseExpires string
			Metadata     map[string]string
		}
	}
	ev := firstEvent(t, f.url+"api/service/events?name=payments", "")
	if err := json.Unmarshal([]byte(ev.Data), &st); err != nil {
		t.Fatalf("decode %s: %v", ev.Data, err)
	}
	if len(st.Instances) != 1 || st.Instances[0].LeaseExpires == "" || st.Instances[0].Metadata["k"] != "v" {
		t.Errorf("state = %s, want one instance with its lease expiry and metadata", ev.Data)
	}
}
