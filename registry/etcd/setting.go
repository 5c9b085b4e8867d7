package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// settingKey builds the options and returns the key (by keyOf: a
// registry.CanaryKey, PolicyKey) of a service setting, checking the
// service name.
func settingKey(opts []Option, keyOf func(prefix, service string) string, service string) (options, string, error) {
	op := buildOptions(opts)
	if op.err != nil {
		return op, "", op.err
	}
	if err := registry.ValidateName(service); err != nil {
		return op, "", err
	}
	return op, keyOf(op.prefix, service), nil
}

// clearSetting deletes the setting what of service, stored under keyOf's
// key, if any.
func clearSetting(ctx context.Context, cli *clientv3.Client, what string, keyOf func(prefix, service string) string,
	service string, opts []Option) error {
	op, key, err := settingKey(opts, keyOf, service)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	if _, err := cli.Delete(ctx, key); err != nil {
		return fmt.Errorf("etcd: delete %s %s: %w", what, key, err)
	}
	return nil
}

// followSetting follows the service setting stored under key (a canary, a
// policy) and sends it on ch, decoded, when first read and after each
// change (the zero T when there is none, or when the value does not
// decode, which is logged): a Get, then a watch from the next revision;
// when the watch ends (an error, a compaction, a lost leader) it reads
// again, backing off between failed attempts. ch coalesces: a send
// replaces what it holds. It closes ch when ctx ends.
func followSetting[T any](ctx context.Context, cli *clientv3.Client, o options, what, key string,
	decode func([]byte) (T, error), ch chan T) {
	defer close(ch)
	publish := func(val []byte) {
		var v T
		if val != nil {
			var err error
			if v, err = decode(val); err != nil {
				var zero T
				v = zero
				o.logger.Error("ignoring a bad "+what+" setting", "key", key, "error", err)
			}
		}
		select {
		case <-ch:
		default:
		}
		ch <- v
	}
	wait := o.backoffMin
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
		resp, err := cli.Get(gctx, key)
		cancel()
		if err != nil {
			o.logger.Warn("cannot read the "+what+" setting; retrying", "key", key, "error", err, "in", wait)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, o.backoffMax)
			continue
		}
		wait = o.backoffMin
		var val []byte
		if len(resp.Kvs) > 0 {
			val = resp.Kvs[0].Value
		}
		publish(val)
		wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				val = nil
				if ev.Type == clientv3.EventTypePut {
					val = ev.Kv.Value
				}
				publish(val)
			}
		}
		stop()
	}
}
