// Package etcdopts holds the registry/etcd options that tests use: timers
// short enough for faults to play out in seconds, and no logs.
package etcdopts

import (
	"io"
	"log/slog"
	"time"

	"github.com/musterhq/muster/registry/etcd"
)

// Fast returns a Registrar's and a Discovery's options for tests: lease TTL
// 2s, backoff 50ms to 500ms, request timeout 2s, progress interval 200ms,
// logs discarded, followed by extra (which override them).
func Fast(extra ...etcd.Option) []etcd.Option {
	return append([]etcd.Option{
		etcd.WithTTL(2 * time.Second),
		etcd.WithBackoff(50*time.Millisecond, 500*time.Millisecond),
		etcd.WithRequestTimeout(2 * time.Second),
		etcd.WithProgressInterval(200 * time.Millisecond),
		etcd.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, extra...)
}
