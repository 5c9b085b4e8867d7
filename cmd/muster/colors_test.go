package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// ls, get and watch show each instance's color and the service's canary,
// and watch follows changes of both.
func TestCommandsShowColorsAndCanary(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	fixClock(t, now)
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	base := registry.Instance{Name: "user", ID: "base", Addr: "10.0.0.1:9000", RegisteredAt: now.Add(-time.Minute)}
	blue := registry.Instance{Name: "user", ID: "blue", Addr: "10.0.0.2:9000", RegisteredAt: now.Add(-time.Minute),
		Metadata: map[string]string{"color": "blue"}}
	register(t, r, base)
	register(t, r, blue)
	ep := []string{"--endpoints", s.endpoint}

	w := start(t, append([]string{"watch", "user"}, ep...)...)
	w.expectWatch(t, `# user: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= base 10\.0\.0\.1:9000 \(weight 100\)`)
	w.expectWatch(t, `= blue 10\.0\.0\.2:9000 \(color blue, weight 100, metadata color=blue\)`)
	wj := start(t, append([]string{"watch", "user", "-o", "json"}, ep...)...)
	if line := wj.next(t, "the list event"); !strings.Contains(line, `"event":"list"`) {
		t.Fatalf("first JSON line: %s", line)
	}

	runOK(t, append([]string{"canary", "user", "blue", "5"}, ep...)...)
	w.expectWatch(t, `% canary 5% of uncolored calls to blue`)
	var ev struct {
		Event  string           `json:"event"`
		Canary *registry.Canary `json:"canary"`
	}
	if err := json.Unmarshal([]byte(wj.next(t, "a canary event")), &ev); err != nil || ev.Event != "canary" ||
		ev.Canary == nil || *ev.Canary != (registry.Canary{Color: "blue", Percent: 5}) {
		t.Fatalf("JSON canary event = %+v (%v), want blue 5", ev, err)
	}

	want := "" +
		"ID    ADDR           VERSION  ZONE  REGION  COLOR  WEIGHT  METADATA    AGE\n" +
		"base  10.0.0.1:9000  -        -     -       -      100     -           60s\n" +
		"blue  10.0.0.2:9000  -        -     -       blue   100     color=blue  60s\n" +
		"canary: 5% of uncolored calls to blue\n"
	if got := runOK(t, append([]string{"ls", "user"}, ep...)...); got.stdout != want {
		t.Fatalf("ls user:\n%s\nwant:\n%s", got.stdout, want)
	}
	want = "" +
		"SERVICE  INSTANCES  CANARY\n" +
		"user     2          5% blue\n"
	if got := runOK(t, append([]string{"ls"}, ep...)...); got.stdout != want {
		t.Fatalf("ls:\n%s\nwant:\n%s", got.stdout, want)
	}
	got := runOK(t, append([]string{"ls", "-o", "json"}, ep...)...)
	var rows []map[string]any
	if err := json.Unmarshal([]byte(got.stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("ls -o json: %v\n%s", err, got.stdout)
	}
	if c, _ := rows[0]["canary"].(map[string]any); rows[0]["name"] != "user" || rows[0]["instances"] != 2.0 ||
		c["color"] != "blue" || c["percent"] != 5.0 {
		t.Fatalf("ls -o json = %v, want user with 2 instances and canary blue 5", rows)
	}
	if got := runOK(t, append([]string{"get", "user", "blue"}, ep...)...); !strings.Contains(got.stdout, "COLOR") ||
		!strings.Contains(got.stdout, " blue   ") {
		t.Fatalf("get user blue shows no color:\n%s", got.stdout)
	}

	// The blue instance turns green, then the canary goes.
	blue.Metadata = map[string]string{"color": "green"}
	register(t, r, blue)
	w.expectWatch(t, `~ blue 10\.0\.0\.2:9000 \(color blue->green, metadata \{color=blue\}->\{color=green\}\)`)
	// Each watch follows the instances and the canary setting through two
	// etcd watches, which keep no order between them: the canary goes once
	// both watchers have shown the change.
	if err := json.Unmarshal([]byte(wj.next(t, "a changed event")), &ev); err != nil || ev.Event != "changed" {
		t.Fatalf("JSON event = %+v (%v), want changed", ev, err)
	}
	runOK(t, append([]string{"canary", "user", "off"}, ep...)...)
	w.expectWatch(t, `% canary off`)
	ev.Canary = nil
	if err := json.Unmarshal([]byte(wj.next(t, "a canary event")), &ev); err != nil || ev.Event != "canary" || ev.Canary != nil {
		t.Fatalf("JSON event = %+v (%v), want canary without a setting", ev, err)
	}
	if got := runOK(t, append([]string{"ls", "user"}, ep...)...); strings.Contains(got.stdout, "canary") {
		t.Fatalf("ls user after canary off:\n%s", got.stdout)
	}
	for _, b := range []*background{w, wj} {
		if code := b.stop(t); code != exitOK {
			t.Fatalf("watch exited %d", code)
		}
	}
}
