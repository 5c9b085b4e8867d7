package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// What only etcd has, on the Store's Admin, for the operator's commands
// to find by a type assertion: reads at a revision, and the lease that
// holds an instance.

// OverridesAt returns the overrides of service's instances as
// Overrides does, read at etcd revision rev (0: the latest), so that a
// caller holding a snapshot of that revision (registry.Snapshot's
// Revision) sees the overrides that went with it. A compacted revision
// is etcd's error.
func (a *admin) OverridesAt(ctx context.Context, service string, rev int64) (map[string]registry.Override, error) {
	if a.err != nil {
		return nil, a.err
	}
	if err := registry.ValidateName(service); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.s.o.requestTimeout)
	defer cancel()
	prefix := registry.ServicePrefix(a.s.o.prefix, service)
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := a.s.cli.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, fmt.Errorf("etcd: read the overrides under %s: %w", prefix, err)
	}
	out := map[string]registry.Override{}
	for _, kv := range resp.Kvs {
		key, ok := registry.ParseOverrideKey(a.s.o.prefix, string(kv.Key))
		if !ok {
			continue
		}
		o, err := registry.UnmarshalOverride(kv.Value)
		if err != nil {
			continue // as every Discovery reads it: no override
		}
		_, id, _ := registry.ParseKey(a.s.o.prefix, key)
		out[id] = o
	}
	return out, nil
}

// Registered returns the value instance id of service was registered
// with, without its override. It fails with an error matching
// ErrNoInstance if there is no such instance, and with the decoding
// error (registry.ErrMalformedValue, ...) if its value does not decode.
func (a *admin) Registered(ctx context.Context, service, id string) (registry.Instance, error) {
	kv, err := a.instance(ctx, service, id)
	if err != nil {
		return registry.Instance{}, err
	}
	return registry.Unmarshal(kv.Value)
}

// LeaseLeft returns how long the lease that holds instance id of service
// has left: 0 when the instance is bound to no lease or its lease is
// gone. It fails with an error matching ErrNoInstance if there is no such
// instance.
func (a *admin) LeaseLeft(ctx context.Context, service, id string) (time.Duration, error) {
	kv, err := a.instance(ctx, service, id)
	if err != nil || kv.Lease == 0 {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.s.o.requestTimeout)
	defer cancel()
	left, err := a.s.leaseLeft(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return 0, fmt.Errorf("etcd: read the lease of %s/%s: %w", service, id, err)
	}
	return max(left, 0), nil
}

// instance reads the key of instance id of service.
func (a *admin) instance(ctx context.Context, service, id string) (*mvccpb.KeyValue, error) {
	if a.err != nil {
		return nil, a.err
	}
	key, err := instanceKey(a.s.o, service, id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.s.o.requestTimeout)
	defer cancel()
	resp, err := a.s.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("etcd: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %s/%s", ErrNoInstance, service, id)
	}
	return resp.Kvs[0], nil
}
