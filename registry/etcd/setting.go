package etcd

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/settingfeed"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd/internal/watchloop"
)

// settingKey builds the options and returns the key (by keyOf: a
// registry.CanaryKey, PolicyKey) of a service setting, checking the
// service name.
func settingKey[O StoreOption](opts []O, keyOf func(prefix, service string) string, service string) (options, string, error) {
	op := buildOptions(opts)
	if op.err != nil {
		return op, "", op.err
	}
	if err := registry.ValidateName(service); err != nil {
		return op, "", err
	}
	return op, keyOf(op.prefix, service), nil
}

// putSetting stores val under key, the setting of service, traced as
// action.
func putSetting(ctx context.Context, cli *clientv3.Client, op options, action, service, key string, val []byte) error {
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	_, err := journaled(ctx, cli, op, tracedWrite{service: service, reads: []string{key},
		plan: func(kvs []*mvccpb.KeyValue) (writePlan, error) {
			return writePlan{action: action, before: valueOf(kvs[0]), after: val, ops: []clientv3.Op{clientv3.OpPut(key, string(val))}}, nil
		}})
	return err
}

// clearSetting deletes the setting what of service, stored under keyOf's
// key, if any, traced as action; without one it writes nothing.
func clearSetting(ctx context.Context, cli *clientv3.Client, what, action string, keyOf func(prefix, service string) string,
	service string, opts []WriteOption) error {
	op, key, err := settingKey(opts, keyOf, service)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	_, err = journaled(ctx, cli, op, tracedWrite{service: service, reads: []string{key},
		plan: func(kvs []*mvccpb.KeyValue) (writePlan, error) {
			if kvs[0] == nil {
				return writePlan{skip: true}, nil
			}
			return writePlan{action: action, before: kvs[0].Value, ops: []clientv3.Op{clientv3.OpDelete(key)}}, nil
		}})
	if err != nil {
		return fmt.Errorf("etcd: delete %s %s: %w", what, key, err)
	}
	return nil
}

// followSetting follows the service setting stored under key (a canary, a
// policy) and sends it on ch, decoded, when first read and after each
// change (the zero T when there is none, or when the value does not
// decode, which is logged), until ctx ends; then it closes ch. It follows
// key with a watchloop.Loop, as the Discovery follows a service: a Get,
// then a watch from the Get's revision kept honest by progress requests,
// given up after a silence for a new stream off the silent member, and
// read again after a compaction, an error or a rewind of etcd's history,
// with backoff. ch coalesces: a send replaces what it holds. streams
// selects the gRPC stream of the watches of one source. unchanged, if not
// nil, reports whether a stored value (cur) says nothing new after the one
// last read (prev), both present: such a value is not sent (a policy's
// setBy alone, the same value read again after a new watch).
func followSetting[T any](ctx context.Context, cli *clientv3.Client, o options, streams *atomic.Uint64, what, key string,
	decode func([]byte) (T, error), unchanged func(prev, cur []byte) bool, ch chan T) {
	defer close(ch)
	f := &settingFollower{what: what, key: key, log: o.logger, send: func(val []byte) {
		settingfeed.Send(ch, val, decode, func(err error) {
			o.logger.Error("ignoring a bad "+what+" setting", "key", key, "error", err)
		})
	}, unchanged: unchanged}
	watchloop.New(watchloop.Config{
		Client: cli, Key: key,
		Every: o.progressEvery, RequestTimeout: o.requestTimeout, BackoffMin: o.backoffMin, BackoffMax: o.backoffMax,
		Streams: streams, StreamTag: "setting-",
	}, f).Run(ctx)
}

// settingFollower is the watchloop.Handler of followSetting: it sends each
// value read that says something new.
type settingFollower struct {
	what, key string
	log       *slog.Logger
	send      func(val []byte)
	unchanged func(prev, cur []byte) bool

	last    []byte // the value last read; nil: none, or nothing read yet
	read    bool   // a value was sent
	loadRev int64  // the revision of the last Get; the watch replays it
}

// publish sends val (nil: no setting) unless it says nothing new.
func (f *settingFollower) publish(val []byte) {
	prev := f.last
	f.last = val
	if f.read && f.unchanged != nil && prev != nil && val != nil && f.unchanged(prev, val) {
		return
	}
	f.read = true
	f.send(val)
}

// Loaded sends the value read.
func (f *settingFollower) Loaded(resp *clientv3.GetResponse) int64 {
	var val []byte
	if len(resp.Kvs) > 0 {
		val = resp.Kvs[0].Value
	}
	f.publish(val)
	f.loadRev = resp.Header.Revision
	return f.loadRev
}

// Apply sends each later value (nil: deleted).
func (f *settingFollower) Apply(wresp clientv3.WatchResponse) {
	for _, ev := range wresp.Events {
		if ev.Kv.ModRevision <= f.loadRev {
			continue // in the Get already
		}
		var val []byte
		if ev.Type == clientv3.EventTypePut {
			val = ev.Kv.Value
		}
		f.publish(val)
	}
}

// Settled has nothing to do: each value was sent as it came.
func (f *settingFollower) Settled(int64) {}

// Rewound has nothing to do: the next Get sends the value of the new
// history.
func (f *settingFollower) Rewound(watchloop.Rewind, string) {}

// Stale has nothing to do: the last value sent stands until a new one is
// read.
func (f *settingFollower) Stale(error) {}

// Retrying logs why the setting is read again.
func (f *settingFollower) Retrying(err error, wait time.Duration) {
	f.log.Warn("cannot follow the "+f.what+" setting; reading it again", "key", f.key, "error", err, "in", wait)
}
