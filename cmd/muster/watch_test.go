package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func TestWatchPrintsChanges(t *testing.T) {
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	u1 := registry.Instance{
		ID: "user-1", Name: "user", Version: "v1.4.2", Addr: "10.0.0.1:9000", Zone: "eu-1a", Region: "eu-1",
		Metadata: map[string]string{"color": "blue"},
	}
	register(t, r, u1)
	// Another service's changes must not show.
	other := registry.Instance{Name: "user-admin", Addr: "10.0.9.1:9000"}

	// --timeout bounds etcd requests, and with them how long a watch that
	// etcd stopped answering stays silent before it is restarted.
	started := time.Now()
	w := start(t, "watch", "user", "--endpoints", s.endpoint, "--timeout", "2s")
	header := w.expectWatch(t, `# user: 1 instance at revision \d+; watching for changes`)
	stamp, _, _ := strings.Cut(header, " ")
	if at, err := time.Parse(watchTimeFormat, stamp); err != nil || at.Before(started.Truncate(time.Millisecond)) || at.After(time.Now()) {
		t.Errorf("header %q starts with %q: want the time it was printed, between %v and now (%v)", header, stamp, started.UTC(), err)
	}
	w.expectWatch(t, `= user-1 10\.0\.0\.1:9000 \(version v1\.4\.2, zone eu-1a, region eu-1, color blue, weight 100, metadata color=blue\)`)

	register(t, r, other)
	u2 := registry.Instance{ID: "user-2", Name: "user", Addr: "10.0.0.2:9000", Weight: 300}
	register(t, r, u2)
	w.expectWatch(t, `\+ user-2 10\.0\.0\.2:9000 \(weight 300\)`)

	u2.Region = "eu-2"
	register(t, r, u2)
	w.expectWatch(t, `~ user-2 10\.0\.0\.2:9000 \(region -->eu-2\)`)

	u2.Draining = true
	register(t, r, u2)
	w.expectWatch(t, `~ user-2 10\.0\.0\.2:9000 \(weight 300->0\)`)

	deregister(t, r, u2)
	w.expectWatch(t, `- user-2 10\.0\.0\.2:9000`)

	// The registry goes away and comes back on the same ports and data.
	s.stop(t)
	w.expectWatch(t, `! stale since \S+: .+ \(showing the last known 1 instance\)`)
	restartServe(t, s)
	w.expectWatch(t, `! fresh again at revision \d+`)

	// The Registrar drains an instance in the transaction before the one
	// that deletes it: the watch shows the drain (weight 0) first, unless
	// both reach it in one response. (user-2 was drained already.)
	deregister(t, r, u1)
	lines := 9
	if line := w.expectWatch(t, `~ user-1 10\.0\.0\.1:9000 \(weight 100->0\)|- user-1 10\.0\.0\.1:9000`); strings.Contains(line, " ~ ") {
		w.expectWatch(t, `- user-1 10\.0\.0\.1:9000`)
		lines++
	}

	if code := w.stop(t); code != exitOK {
		t.Fatalf("watch stopped by its context: exit code %d, want 0; stderr:\n%s", code, w.stderr)
	}
	// Before the restarted server stops, so that it can revoke its lease.
	r.Close()
	if extra := len(w.seen); extra != lines {
		t.Fatalf("watch printed %d lines, want %d:\n%v", extra, lines, w.seen)
	}
}

func TestWatchJSON(t *testing.T) {
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)

	w := start(t, "watch", "billing", "--endpoints", s.endpoint, "-o", "json")
	type event struct {
		Event     string            `json:"event"`
		Service   string            `json:"service"`
		Revision  int64             `json:"revision"`
		Instances []json.RawMessage `json:"instances"`
		Instance  map[string]any    `json:"instance"`
		Previous  map[string]any    `json:"previous"`
		Time      string            `json:"time"`
	}
	// nextOf reads the next event, which must be one of whats.
	nextOf := func(whats ...string) event {
		t.Helper()
		line := w.next(t, strings.Join(whats, " or "))
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		if !slices.Contains(whats, ev.Event) || ev.Service != "billing" || ev.Time == "" || ev.Revision == 0 {
			t.Fatalf("got %s, want a %q event of service billing with time and revision", line, strings.Join(whats, " or "))
		}
		return ev
	}
	next := func(what string) event { t.Helper(); return nextOf(what) }

	ev := next("list")
	if ev.Instances == nil || len(ev.Instances) != 0 {
		t.Fatalf("first event lists %v, want an empty list []", ev.Instances)
	}

	in := registry.Instance{Name: "billing", Addr: "10.0.1.1:7000", Zone: "eu-1b", Region: "eu-1"}
	register(t, r, in)
	ev = next("added")
	for k, want := range map[string]any{"v": 1.0, "id": "10.0.1.1:7000", "name": "billing", "addr": "10.0.1.1:7000", "zone": "eu-1b", "region": "eu-1", "weight": 100.0} {
		if got := ev.Instance[k]; !reflect.DeepEqual(got, want) {
			t.Errorf("added instance field %q = %v, want %v (instance %v)", k, got, want, ev.Instance)
		}
	}
	if _, ok := ev.Instance["registered_at"]; !ok {
		t.Errorf("added instance has no registered_at: %v", ev.Instance)
	}

	in.Weight = 50
	register(t, r, in)
	ev = next("changed")
	if ev.Instance["weight"] != 50.0 || ev.Previous["weight"] != 100.0 {
		t.Fatalf("changed event has weight %v, previous %v; want 50 and 100", ev.Instance["weight"], ev.Previous["weight"])
	}

	deregister(t, r, in)
	// The Registrar drains an instance in the transaction before the one
	// that deletes it, so that clients release it at once: a watch sees
	// the drain (weight 0) unless both reach it in one response.
	if ev = nextOf("changed", "removed"); ev.Event == "changed" {
		if ev.Instance["weight"] != 0.0 || ev.Previous["weight"] != 50.0 {
			t.Fatalf("changed event before the removal has weight %v, previous %v; want the drain, 0 after 50",
				ev.Instance["weight"], ev.Previous["weight"])
		}
		ev = next("removed")
	}
	if ev.Instance["id"] != "10.0.1.1:7000" {
		t.Fatalf("removed event names %v, want the deregistered instance", ev.Instance)
	}
	if code := w.stop(t); code != exitOK {
		t.Fatalf("watch -o json: exit code %d, want 0; stderr:\n%s", code, w.stderr)
	}
}
