package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// LeaseReader is implemented by a Store whose instances are held by
// leases that their registrars renew (the etcd Store), for a view of the
// registry such as the console: it tells when each instance leaves unless
// its lease is renewed. A backend without such leases (ZooKeeper's
// sessions) does not implement it.
type LeaseReader interface {
	// LeaseExpiry returns when the lease of each registered instance of
	// service runs out unless renewed, by instance ID; an instance
	// without a lease is left out. It looks up at most limit leases (one
	// request each; limit <= 0: every one), so instances held by the
	// others are left out too.
	LeaseExpiry(ctx context.Context, service string, limit int) (map[string]time.Time, error)
}

var _ LeaseReader = (*Store)(nil)

// LeaseExpiry implements LeaseReader: one read of service's keys, then
// one request per lease. It waits for etcd at most the store's request
// timeout (WithRequestTimeout) or until ctx ends.
func (s *Store) LeaseExpiry(ctx context.Context, service string, limit int) (map[string]time.Time, error) {
	if err := registry.ValidateName(service); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.requestTimeout)
	defer cancel()
	prefix := registry.ServicePrefix(s.o.prefix, service)
	// Not WithKeysOnly: etcd 3.7 then reads keys from its index alone,
	// without their leases.
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: read the keys under %s: %w", prefix, err)
	}
	leases := map[clientv3.LeaseID][]string{}
	for _, kv := range resp.Kvs {
		// An override key has one element more than <service>/<id>:
		// ParseKey refuses it.
		if _, id, err := registry.ParseKey(s.o.prefix, string(kv.Key)); err == nil && kv.Lease != 0 {
			leases[clientv3.LeaseID(kv.Lease)] = append(leases[clientv3.LeaseID(kv.Lease)], id)
		}
	}
	out := map[string]time.Time{}
	n := 0
	for lease, ids := range leases {
		if n++; limit > 0 && n > limit {
			break
		}
		left, err := s.leaseLeft(ctx, lease)
		if err != nil || left < 0 {
			continue // not answered, or gone: unknown
		}
		at := time.Now().Add(left)
		for _, id := range ids {
			out[id] = at
		}
	}
	return out, nil
}

// leaseLeft returns how long lease has left, whole seconds as etcd counts
// them; negative when etcd no longer has the lease. It is the one reading
// of a lease's time for every view (LeaseExpiry, the Admin's LeaseLeft).
func (s *Store) leaseLeft(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	ttl, err := s.cli.TimeToLive(ctx, lease)
	if err != nil {
		return 0, err
	}
	return time.Duration(ttl.TTL) * time.Second, nil
}

// WatchPolicyInfo follows service's policy with who set it and when, as
// Policies.WatchPolicyInfo does, for a view of the registry (the console),
// over one follower per service for every reader of the store.
func (s *Store) WatchPolicyInfo(ctx context.Context, service string) <-chan registry.PolicyInfo {
	return s.policyInfos.Watch(ctx, service)
}
