package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A canary watch sees the setting as it is, each change, a bad value as
// none, and the removal; its channel closes when its context ends.
func TestCanariesFollowTheSetting(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	if err := etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: 5}, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	cs, err := etcd.NewCanaries(cli, watching("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ch := cs.WatchCanary(wctx, "svc")
	next := func(want registry.Canary) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("canary %+v, want %+v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no canary setting within 10s, want %+v", want)
		}
	}
	next(registry.Canary{Color: "blue", Percent: 5})
	if err := etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: 50}, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	next(registry.Canary{Color: "blue", Percent: 50})
	if _, err := cli.Put(ctx, registry.CanaryKey("/p", "svc"), `{"v":1,"color":"blue","percent":500}`); err != nil {
		t.Fatal(err)
	}
	next(registry.Canary{}) // a bad value counts as none
	if err := etcd.ClearCanary(ctx, cli, "svc", writes("/p")...); err != nil {
		t.Fatal(err)
	}
	next(registry.Canary{})
	stop()
	for range ch { // drains until the watch ends and closes it
	}
}

func TestSetCanaryRejectsBadSettings(t *testing.T) {
	ctx := context.Background()
	var fe *registry.FieldError
	for _, c := range []registry.Canary{{Color: "", Percent: 5}, {Color: "blue", Percent: 101}, {Color: "blue", Percent: -1}} {
		if err := etcd.SetCanary(ctx, nil, "svc", c); !errors.As(err, &fe) {
			t.Errorf("SetCanary(%+v) = %v, want a *registry.FieldError", c, err)
		}
	}
	if err := etcd.SetCanary(ctx, nil, "Bad Name", registry.Canary{Color: "blue", Percent: 5}); err == nil {
		t.Error("SetCanary with an invalid service name succeeded")
	}
}
