package etcd_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A policy is written beside the canary, bound to no lease, normalized;
// GetPolicy reads it back, a second SetPolicy replaces it, ClearPolicy
// removes it, and nothing of it is in the instances' range.
func TestPolicySetGetClear(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)

	if p, ok, err := etcd.GetPolicy(ctx, cli, "svc", at("/p")...); err != nil || ok || !reflect.DeepEqual(p, registry.Policy{}) {
		t.Fatalf("GetPolicy with none stored = %+v, %v, %v; want the zero Policy, false, nil", p, ok, err)
	}
	set := registry.Policy{Timeout: 800 * time.Millisecond, Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"unavailable"}}}
	if err := etcd.SetPolicy(ctx, cli, "svc", set, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	keys, leases := rawKeys(t, cli, "/p")
	// The policy, and the journal's sequence and first record of the write.
	if want := []string{"/p.history/svc", "/p.history/svc/00000", "/p.policy/svc"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys after SetPolicy: %q, want %q", keys, want)
	}
	if l := leases["/p.policy/svc"]; l != 0 {
		t.Fatalf("the policy is bound to lease %x, want none", l)
	}
	got, ok, err := etcd.GetPolicy(ctx, cli, "svc", at("/p")...)
	if err != nil || !ok {
		t.Fatalf("GetPolicy = %v, %v; want the policy", ok, err)
	}
	if want := set.Normalize(); !reflect.DeepEqual(got, want) {
		t.Fatalf("GetPolicy = %+v, want %+v (normalized)", got, want)
	}
	if got.Retry.BackoffBase != registry.DefaultRetryBackoffBase {
		t.Fatalf("stored backoffBase %v, want the default %v", got.Retry.BackoffBase, registry.DefaultRetryBackoffBase)
	}

	// Another Set replaces the whole policy.
	if err := etcd.SetPolicy(ctx, cli, "svc", registry.Policy{MaxConcurrent: 10}, writes("/p")...); err != nil {
		t.Fatal(err)
	}
	if got, _, err := etcd.GetPolicy(ctx, cli, "svc", at("/p")...); err != nil || !reflect.DeepEqual(got, registry.Policy{MaxConcurrent: 10}) {
		t.Fatalf("GetPolicy after a second SetPolicy = %+v, %v; want only maxConcurrent 10", got, err)
	}
	// Under another prefix, there is none.
	if _, ok, err := etcd.GetPolicy(ctx, cli, "svc", at("/q")...); err != nil || ok {
		t.Fatalf("GetPolicy under another prefix = %v, %v; want none", ok, err)
	}

	// No Discovery of the prefix sees it as a service or an instance.
	d := newDiscovery(t, cli, disc("/p")...)
	if svcs, err := d.Services(ctx); err != nil || len(svcs) != 0 {
		t.Fatalf("Services with only a policy stored = %v, %v; want none", svcs, err)
	}

	if err := etcd.ClearPolicy(ctx, cli, "svc", writes("/p")...); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := etcd.GetPolicy(ctx, cli, "svc", at("/p")...); err != nil || ok {
		t.Fatalf("GetPolicy after ClearPolicy = %v, %v; want none", ok, err)
	}
	// Nothing but the journal of the three writes.
	if keys, _ := rawKeys(t, cli, "/p"); !reflect.DeepEqual(keys, []string{"/p.history/svc", "/p.history/svc/00000", "/p.history/svc/00001", "/p.history/svc/00002"}) {
		t.Fatalf("keys after ClearPolicy: %q", keys)
	}
	// Clearing what is not there is no error.
	if err := etcd.ClearPolicy(ctx, cli, "svc", writes("/p")...); err != nil {
		t.Fatalf("ClearPolicy of no policy: %v", err)
	}
}

// A stored value that does not decode is an error of GetPolicy, with the
// codec's sentinel and the key.
func TestGetPolicyOfABadValue(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	for val, want := range map[string]error{
		`{"v":1,"maxConcurrent":-5}`: registry.ErrInvalidInstance,
		`{"v":9}`:                    registry.ErrUnsupportedVersion,
		`{`:                          registry.ErrMalformedValue,
	} {
		if _, err := cli.Put(ctx, registry.PolicyKey("/p", "svc"), val); err != nil {
			t.Fatal(err)
		}
		p, ok, err := etcd.GetPolicy(ctx, cli, "svc", at("/p")...)
		if !errors.Is(err, want) || ok || !reflect.DeepEqual(p, registry.Policy{}) {
			t.Errorf("GetPolicy of %s = %+v, %v, %v; want %v", val, p, ok, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "/p.policy/svc") {
			t.Errorf("GetPolicy's error %q does not name the key", err)
		}
	}
}

// Bad policies, names and options are refused before etcd is asked (the
// client here is nil).
func TestSetPolicyRejectsBadSettings(t *testing.T) {
	ctx := context.Background()
	var fe *registry.FieldError
	for _, tc := range []struct {
		p     registry.Policy
		field string
	}{
		{registry.Policy{Timeout: 2 * time.Hour}, "timeout"},
		{registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2}}, "retry.codes"},
		{registry.Policy{Outlier: registry.OutlierPolicy{FailurePercent: 101}}, "outlier.failurePercent"},
		{registry.Policy{MaxConcurrent: -1}, "maxConcurrent"},
		{registry.Policy{AffinityHeader: "Bad Header"}, "affinityHeader"},
	} {
		if err := etcd.SetPolicy(ctx, nil, "svc", tc.p); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("SetPolicy(%+v) = %v, want a *registry.FieldError for %s", tc.p, err, tc.field)
		}
	}
	if err := etcd.SetPolicy(ctx, nil, "svc", registry.Policy{}); err == nil || !strings.Contains(err.Error(), "ClearPolicy") {
		t.Errorf("SetPolicy of the zero Policy = %v, want an error pointing to ClearPolicy", err)
	}
	ok := registry.Policy{MaxConcurrent: 1}
	if err := etcd.SetPolicy(ctx, nil, "Bad Name", ok); err == nil {
		t.Error("SetPolicy with an invalid service name succeeded")
	}
	if err := etcd.SetPolicy(ctx, nil, "svc", ok, etcd.WithPrefix("/")); err == nil {
		t.Error("SetPolicy with an invalid prefix succeeded")
	}
	if _, _, err := etcd.GetPolicy(ctx, nil, "Bad Name"); err == nil {
		t.Error("GetPolicy with an invalid service name succeeded")
	}
	if err := etcd.ClearPolicy(ctx, nil, "svc", etcd.WithRequestTimeout(0)); err == nil {
		t.Error("ClearPolicy with an invalid request timeout succeeded")
	}
}
