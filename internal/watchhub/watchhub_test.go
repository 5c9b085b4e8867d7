package watchhub_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

func woken(ch <-chan struct{}) bool {
	select {
	case _, ok := <-ch:
		return ok
	default:
		return false
	}
}

func closedWithin(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("Updates not closed within 10s")
		}
	}
}

func TestUpdateWakesAndCoalesces(t *testing.T) {
	var idle atomic.Int32
	h := watchhub.New("svc", func() { idle.Add(1) })
	w := h.Watch(context.Background(), "alias")
	if woken(w.Updates()) {
		t.Fatalf("woken before the first load")
	}
	for i := 1; i <= 3; i++ {
		h.Update(func(s *registry.Snapshot) bool {
			s.Loaded, s.Revision = true, int64(i)
			return true
		})
	}
	if !woken(w.Updates()) || woken(w.Updates()) {
		t.Fatalf("three updates should wake the watcher exactly once")
	}
	if s := w.Snapshot(); s.Revision != 3 || s.Service != "alias" || h.Snapshot().Service != "svc" {
		t.Fatalf("snapshot %+v (hub's %+v)", s, h.Snapshot())
	}
	h.Update(func(s *registry.Snapshot) bool { s.Revision = 4; return false })
	if woken(w.Updates()) || w.Snapshot().Revision != 4 {
		t.Fatalf("an update returning false must change the snapshot without waking")
	}
	late := h.Watch(context.Background(), "svc")
	if !woken(late.Updates()) {
		t.Fatalf("a watcher added after the load is not woken at once")
	}
	_ = w.Close()
	if idle.Load() != 0 {
		t.Fatalf("idle called with a watcher left")
	}
	_ = late.Close()
	_ = late.Close()
	if idle.Load() != 1 || h.Watchers() != 0 {
		t.Fatalf("idle called %d times, %d watchers; want once and none", idle.Load(), h.Watchers())
	}
	closedWithin(t, late.Updates())
}

func TestContextClosesWatcher(t *testing.T) {
	idle := make(chan struct{}, 2)
	h := watchhub.New("svc", func() { idle <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	w := h.Watch(ctx, "svc")
	cancel()
	closedWithin(t, w.Updates())
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatalf("idle not called after the context closed the last watcher")
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	closedWithin(t, h.Watch(done, "svc").Updates())
}

func TestCloseAll(t *testing.T) {
	h := watchhub.New("svc", func() { t.Errorf("idle called by CloseAll") })
	ws := []registry.Watcher{h.Watch(context.Background(), "svc"), h.Watch(t.Context(), "svc")}
	h.CloseAll()
	for _, w := range ws {
		closedWithin(t, w.Updates())
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	h.Update(func(s *registry.Snapshot) bool { s.Err = errors.New("x"); return true })
}
