package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/internal/settingfeed"
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
	service string, opts []Option) error {
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
// decode, which is logged): a Get, then a watch from the Get's revision.
// The watch is kept honest as the Discovery's are: progress is requested
// every progress interval (WithProgressInterval), and a watch that answers
// nothing for 2.5 intervals (a frozen or partitioned member keeps its
// connection up) is given up for a new one on another gRPC stream, which
// the client places on another member, after a new Get. After any end of
// the watch (an error, a compaction, a lost leader) the key is read again,
// backing off between failed attempts. ch coalesces: a send replaces what
// it holds. It closes ch when ctx ends. streams selects the gRPC stream of
// the watches of one source, moved on after a silence. unchanged, if not
// nil, reports whether a stored value (cur) says nothing new after the one
// last read (prev), both present: such a value is not sent (a policy's
// setBy alone, the same value read again after a new watch).
func followSetting[T any](ctx context.Context, cli *clientv3.Client, o options, streams *atomic.Uint64, what, key string,
	decode func([]byte) (T, error), unchanged func(prev, cur []byte) bool, ch chan T) {
	defer close(ch)
	var last []byte // the value last read; nil: none, or nothing read yet
	read := false
	publish := func(val []byte) {
		prev := last
		last = val
		if read && unchanged != nil && prev != nil && val != nil && unchanged(prev, val) {
			return
		}
		read = true
		settingfeed.Send(ch, val, decode, func(err error) {
			o.logger.Error("ignoring a bad "+what+" setting", "key", key, "error", err)
		})
	}
	bo := backoff.New(o.backoffMin, o.backoffMax)
	backoff.Retry(ctx, bo, func(ctx context.Context) error {
		gctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
		resp, err := cli.Get(gctx, key)
		cancel()
		if err != nil {
			return err
		}
		bo.Reset()
		var val []byte
		if len(resp.Kvs) > 0 {
			val = resp.Kvs[0].Value
		}
		publish(val)
		return watchSetting(ctx, cli, o, streams, key, resp.Header.Revision, publish)
	}, func(err error, wait time.Duration) {
		o.logger.Warn("cannot follow the "+what+" setting; reading it again", "key", key, "error", err, "in", wait)
	})
}

// watchSetting watches key from rev, whose value was published, and
// publishes each later value (nil: deleted) until the watch ends or is
// silent for 2.5 progress intervals; it returns why. A silence moves
// streams on, so that the next watch opens a new gRPC stream.
func watchSetting(ctx context.Context, cli *clientv3.Client, o options, streams *atomic.Uint64, key string, rev int64,
	publish func([]byte)) error {
	stream := streams.Load()
	wctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		watchStreamKey, "setting-"+strconv.FormatUint(stream, 10)))
	defer cancel()
	every, silentLimit := o.progressEvery, o.silenceLimit()
	// Watch itself blocks until the client's stream takes the request,
	// which a stream opening on a stalled connection may never do. From
	// rev, not rev+1: etcd answers a progress request only when every
	// watcher of the stream starts at or below the store's revision.
	opened := make(chan clientv3.WatchChan, 1)
	go func() {
		opened <- cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	}()
	var wch clientv3.WatchChan
	notOpened := time.NewTimer(silentLimit)
	select {
	case wch = <-opened:
		notOpened.Stop()
	case <-notOpened.C:
		streams.CompareAndSwap(stream, stream+1)
		cancel()
		<-opened
		return fmt.Errorf("etcd: the watch of %s was not taken within %v", key, silentLimit)
	}
	lastHeard := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wch:
			switch {
			case !ok:
				return errors.New("etcd: watch channel closed")
			case wr.CompactRevision != 0:
				return fmt.Errorf("etcd: watch %s from revision %d: compacted at %d", key, rev, wr.CompactRevision)
			case wr.Err() != nil:
				return fmt.Errorf("etcd: watch %s: %w", key, wr.Err())
			case wr.Canceled:
				return fmt.Errorf("etcd: watch %s canceled: %s", key, wr.CancelReason)
			}
			lastHeard = time.Now()
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision <= rev {
					continue // in the Get already
				}
				var val []byte
				if ev.Type == clientv3.EventTypePut {
					val = ev.Kv.Value
				}
				publish(val)
			}
		case now := <-tick.C:
			if quiet := now.Sub(lastHeard); quiet >= silentLimit {
				streams.CompareAndSwap(stream, stream+1)
				return fmt.Errorf("etcd: no response on the watch of %s for %v", key, quiet.Round(time.Millisecond))
			}
			// Answered on this watch's stream, if it is alive (the
			// context's metadata selects the stream).
			pctx, pcancel := context.WithTimeout(wctx, every/2)
			_ = cli.RequestProgress(pctx)
			pcancel()
		}
	}
}
