package etcd_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A policy watch sees the policy as it is, each change, a bad value as
// none, and the removal; its channel closes when its context ends.
func TestPoliciesFollowThePolicy(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	first := registry.Policy{Timeout: 800 * time.Millisecond}
	if err := etcd.SetPolicy(ctx, cli, "svc", first, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	ps, err := etcd.NewPolicies(cli, watching("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ch := ps.WatchPolicy(wctx, "svc")
	next := func(want registry.Policy) {
		t.Helper()
		nextPolicy(t, ch, want)
	}
	next(first)
	retry := registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}}}
	if err := etcd.SetPolicy(ctx, cli, "svc", retry, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	next(retry.Normalize())
	if _, err := cli.Put(ctx, registry.PolicyKey("/p", "svc"), `{"v":1,"timeout":"2h"}`); err != nil {
		t.Fatal(err)
	}
	next(registry.Policy{}) // a bad value counts as none
	if err := etcd.ClearPolicy(ctx, cli, "svc", writes("/p")...); err != nil {
		t.Fatal(err)
	}
	next(registry.Policy{})
	stop()
	for range ch { // drains until the watch ends and closes it
	}
	if _, err := etcd.NewPolicies(nil); err == nil {
		t.Error("NewPolicies(nil) succeeded")
	}
}

// nextPolicy receives the next policy of ch and fails t unless it is want,
// within 10s.
func nextPolicy(t *testing.T, ch <-chan registry.Policy, want registry.Policy) {
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

// A policy stored again with only who set it and when changed is no
// change: a policy watch does not send it. The watch sends on an unbuffered
// channel here, so every value it sends is received, in order, and none is
// coalesced away.
func TestWatchPolicyIgnoresWhoSetIt(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	ps, err := etcd.NewPolicies(cli, watching("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	set := func(p registry.Policy, who, source string) {
		t.Helper()
		if err := etcd.SetPolicy(ctx, cli, "svc", p, writes("/p", etcd.WithBy(who), etcd.WithSource(source))...); err != nil {
			t.Fatal(err)
		}
	}
	first, second := registry.Policy{Timeout: time.Second}, registry.Policy{Timeout: 2 * time.Second}
	set(first, "alice", registry.SourceConsole)
	wctx, stop := context.WithCancel(ctx)
	ch := make(chan registry.Policy)
	done := make(chan struct{})
	go func() {
		defer close(done)
		etcd.FollowPolicy(ps, wctx, "svc", ch)
	}()
	nextPolicy(t, ch, first)
	set(first, "bob", registry.SourceCommand) // the same policy, another setter
	set(second, "bob", registry.SourceCommand)
	nextPolicy(t, ch, second)
	stop()
	for range ch {
	}
	<-done
}

// WithBy records who set a policy, from where, and when; GetPolicyInfo and
// WatchPolicyInfo read them, GetPolicy and clients do not; a bad name is
// refused and writes nothing.
func TestPolicySetByIsRecorded(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	p := registry.Policy{Timeout: 800 * time.Millisecond}
	if err := etcd.SetPolicy(ctx, cli, "svc", p, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	if info, ok, err := etcd.GetPolicyInfo(ctx, cli, "svc", at("/p")...); err != nil || !ok || info.SetBy != "" || !info.SetAt.IsZero() {
		t.Fatalf("GetPolicyInfo of a policy set without WithBy = %+v, %v, %v; want nobody, no time", info, ok, err)
	}
	ps, err := etcd.NewPolicies(cli, watching("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	infos := ps.WatchPolicyInfo(ctx, "svc")
	next := func() registry.PolicyInfo {
		t.Helper()
		select {
		case info := <-infos:
			return info
		case <-time.After(10 * time.Second):
			t.Fatal("no policy info within 10s")
			return registry.PolicyInfo{}
		}
	}
	if info := next(); info.SetBy != "" || !info.Policy.Equal(p) {
		t.Fatalf("first info %+v", info)
	}
	before := time.Now().UTC()
	if err := etcd.SetPolicy(ctx, cli, "svc", p, writes("/p", etcd.WithBy("alice"), etcd.WithSource(registry.SourceConsole))...); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UTC()
	info, ok, err := etcd.GetPolicyInfo(ctx, cli, "svc", at("/p")...)
	if err != nil || !ok || info.SetBy != "alice (console)" || info.SetAt.Before(before.Truncate(time.Second)) || info.SetAt.After(after) ||
		info.SetAt.Location() != time.UTC || !info.Policy.Equal(p) {
		t.Fatalf("GetPolicyInfo = %+v, %v, %v; want alice between %v and %v", info, ok, err, before, after)
	}
	if got := next(); got.SetBy != "alice (console)" || !got.SetAt.Equal(info.SetAt) {
		t.Fatalf("WatchPolicyInfo after a set by alice: %+v", got)
	}
	if got, _, err := etcd.GetPolicy(ctx, cli, "svc", at("/p")...); err != nil || !got.Equal(p) {
		t.Fatalf("GetPolicy = %+v, %v", got, err)
	}
	for _, who := range []string{"", "a\tb", strings.Repeat("x", registry.MaxSetByLen+1)} {
		err := etcd.SetPolicy(ctx, cli, "svc", registry.Policy{MaxConcurrent: 1}, writes("/p", etcd.WithBy(who))...)
		if err == nil || !strings.Contains(err.Error(), "WithBy") {
			t.Errorf("WithBy(%q): %v, want an error naming it", who, err)
		}
	}
	if got, _, _ := etcd.GetPolicyInfo(ctx, cli, "svc", at("/p")...); !reflect.DeepEqual(got, info) {
		t.Fatalf("a refused SetPolicy wrote %+v", got)
	}
}
