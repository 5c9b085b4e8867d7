package etcd

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

// A policy stored again with only who set it and when changed is no
// change: a policy watch does not send it. The watch sends on an unbuffered
// channel here, so every value it sends is received, in order, and none is
// coalesced away.
func TestWatchPolicyIgnoresWhoSetIt(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := NewPolicies(cli, WithPrefix("/p"), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	set := func(p registry.Policy, who string) {
		t.Helper()
		if err := SetPolicy(ctx, cli, "svc", p, WithPrefix("/p"), WithSetBy(who)); err != nil {
			t.Fatal(err)
		}
	}
	first, second := registry.Policy{Timeout: time.Second}, registry.Policy{Timeout: 2 * time.Second}
	set(first, "alice (console)")
	wctx, stop := context.WithCancel(ctx)
	ch := make(chan registry.Policy)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ps.follow(wctx, "svc", ch)
	}()
	next := func(want registry.Policy) {
		t.Helper()
		select {
		case got := <-ch:
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("policy %+v, want %+v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no policy within 10s, want %+v", want)
		}
	}
	next(first)
	set(first, "bob (command)") // the same policy, another setter
	set(second, "bob (command)")
	next(second)
	stop()
	for range ch {
	}
	<-done
}
