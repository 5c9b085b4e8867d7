package etcd

import (
	"context"
	"fmt"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// SetCanary writes an operator's canary setting of service (see
// registry.Canary): c.Percent of the uncolored calls of every client that
// follows it (resolver.WithCanaries) go to the instances of c.Color. The
// setting is bound to no lease: it stays until ClearCanary. The write is
// traced: its registry.Record lands in the service's journal in the same
// transaction (see History).
func SetCanary(ctx context.Context, cli *clientv3.Client, service string, c registry.Canary, opts ...WriteOption) error {
	val, err := registry.MarshalCanary(c)
	if err != nil {
		return err
	}
	op, key, err := canaryKey(opts, service)
	if err != nil {
		return err
	}
	if err := putSetting(ctx, cli, op, registry.ActionCanary, service, key, val); err != nil {
		return fmt.Errorf("etcd: write canary %s: %w", key, err)
	}
	return nil
}

// ClearCanary removes the canary setting of service, if any: its uncolored
// calls all go to the base again. It is traced as SetCanary is; without a
// canary it writes nothing.
func ClearCanary(ctx context.Context, cli *clientv3.Client, service string, opts ...WriteOption) error {
	return clearSetting(ctx, cli, "canary", registry.ActionCanaryOff, registry.CanaryKey, service, opts)
}

func canaryKey[O StoreOption](opts []O, service string) (options, string, error) {
	return settingKey(opts, registry.CanaryKey, service)
}

// Canaries follows the canary settings stored by SetCanary, for
// resolver.WithCanaries. It is safe for concurrent use and holds no
// resources of its own: each WatchCanary runs until its context ends.
type Canaries struct {
	cli     *clientv3.Client
	o       options
	streams atomic.Uint64 // the gRPC stream of the watches, moved on after a silence
}

var _ registry.CanarySource = (*Canaries)(nil)

// NewCanaries returns a Canaries over cli. An invalid option is an error.
func NewCanaries(cli *clientv3.Client, opts ...WatchOption) (*Canaries, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	if cli == nil {
		return nil, fmt.Errorf("etcd: NewCanaries: nil client")
	}
	return &Canaries{cli: cli, o: o}, nil
}

// WatchCanary implements registry.CanarySource: a Get, then a watch,
// given up for another on a new gRPC stream after 2.5 progress intervals
// without an answer (a frozen or partitioned member); when the watch ends
// (an error, a compaction, a lost leader, a silence) it reads again,
// backing off between failed attempts. A value that does not decode is
// logged and read as no canary, which keeps the uncolored calls on the
// base.
func (c *Canaries) WatchCanary(ctx context.Context, service string) <-chan registry.Canary {
	ch := make(chan registry.Canary, 1)
	go followSetting(ctx, c.cli, c.o, &c.streams, "canary", registry.CanaryKey(c.o.prefix, service), registry.UnmarshalCanary, nil, ch)
	return ch
}
