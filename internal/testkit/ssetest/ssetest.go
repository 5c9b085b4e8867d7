// Package ssetest reads server-sent event streams (text/event-stream) in
// tests, as a browser's EventSource does: one Event per blank-line-ended
// block of "event:", "id:" and "data:" lines.
package ssetest

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
)

// Event is one server-sent event.
type Event struct {
	// Name is the event's type ("event:"); empty for the default.
	Name string
	// ID is its id ("id:"), if any.
	ID string
	// Data is its data ("data:"; one line in the streams tested here).
	Data string
}

// Open GETs url with the given header (nil: none) and returns the stream's
// events, in order, on a channel that is closed when the stream ends or
// ctx does; a reader that stops reading must end ctx. It fails t if the
// request fails or the answer is not 200 with Content-Type
// text/event-stream.
func Open(ctx context.Context, t testing.TB, url string, header http.Header) <-chan Event {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("GET %s: %s, Content-Type %q", url, resp.Status, ct)
	}
	events := make(chan Event, 64)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 8<<20) // the largest event a console sends is bounded well below this
		var ev Event
		started := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && started:
				select {
				case events <- ev:
				case <-ctx.Done():
					return
				}
				ev, started = Event{}, false
			case strings.HasPrefix(line, "event: "):
				ev.Name, started = strings.TrimPrefix(line, "event: "), true
			case strings.HasPrefix(line, "id: "):
				ev.ID, started = strings.TrimPrefix(line, "id: "), true
			case strings.HasPrefix(line, "data: "):
				ev.Data, started = strings.TrimPrefix(line, "data: "), true
			}
		}
	}()
	return events
}

// First returns the first event of the stream at url (see Open) whose name
// is name, or any event if name is empty; it fails t if the stream ends or
// ctx does first.
func First(ctx context.Context, t testing.TB, url string, header http.Header, name string) Event {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for ev := range Open(ctx, t, url, header) {
		if name == "" || ev.Name == name {
			return ev
		}
	}
	t.Fatalf("stream %s ended before an event %q: %v", url, name, ctx.Err())
	return Event{}
}
