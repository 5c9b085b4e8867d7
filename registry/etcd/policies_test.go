package etcd_test

import (
	"context"
	"reflect"
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
	opts := fast("/p")
	first := registry.Policy{Timeout: 800 * time.Millisecond}
	if err := etcd.SetPolicy(ctx, cli, "svc", first, opts...); err != nil {
		t.Fatal(err)
	}
	ps, err := etcd.NewPolicies(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ch := ps.WatchPolicy(wctx, "svc")
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
	retry := registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}}}
	if err := etcd.SetPolicy(ctx, cli, "svc", retry, opts...); err != nil {
		t.Fatal(err)
	}
	next(retry.Normalize())
	if _, err := cli.Put(ctx, registry.PolicyKey("/p", "svc"), `{"v":1,"timeout":"2h"}`); err != nil {
		t.Fatal(err)
	}
	next(registry.Policy{}) // a bad value counts as none
	if err := etcd.ClearPolicy(ctx, cli, "svc", opts...); err != nil {
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
