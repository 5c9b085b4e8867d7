package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	name, id, data string
}

// firstEvent opens the event stream at url (with Last-Event-ID lastID if
// not empty) and returns its first event.
func firstEvent(t *testing.T, url, lastID string) sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET %s: %s, Content-Type %q", url, resp.Status, ct)
	}
	var ev sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.name != "":
			return ev
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("stream %s ended before an event: %v", url, sc.Err())
	return ev
}

func TestConsoleEventStreamResumesFromLastEventID(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", map[string]string{"k": "v"}))
	for _, url := range []string{f.url + "api/service/events?name=payments", f.url + "api/services/events"} {
		ev := firstEvent(t, url, "")
		if ev.name != "state" || ev.id == "" {
			t.Fatalf("%s: first event %+v, want a state with an id", url, ev)
		}
		again := firstEvent(t, url, ev.id)
		if again.name != "resumed" || again.id != ev.id {
			t.Errorf("%s: after Last-Event-ID %s, first event %+v, want resumed", url, ev.id, again)
		}
		older := firstEvent(t, url, "1")
		if older.name != "state" {
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
	if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
		t.Fatalf("decode %s: %v", ev.data, err)
	}
	if len(st.Instances) != 1 || st.Instances[0].LeaseExpires == "" || st.Instances[0].Metadata["k"] != "v" {
		t.Errorf("state = %s, want one instance with its lease expiry and metadata", ev.data)
	}
}
