// Package etcdopts holds the registry/etcd options that tests use: timers
// short enough for faults to play out in seconds, and no logs. Each
// function gives the options one constructor takes, followed by extra
// (which override them).
package etcdopts

import (
	"io"
	"log/slog"
	"time"

	"github.com/musterhq/muster/registry/etcd"
)

// ttl is the lease TTL of Fast and Registrar.
const ttl = 2 * time.Second

// watch returns the options of everything that watches etcd: backoff 50ms
// to 500ms, request timeout 2s, progress interval 200ms, logs discarded.
func watch() []etcd.WatchOption {
	return []etcd.WatchOption{
		etcd.WithBackoff(50*time.Millisecond, 500*time.Millisecond),
		etcd.WithRequestTimeout(2 * time.Second),
		etcd.WithProgressInterval(200 * time.Millisecond),
		etcd.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
}

// as returns opts as options of a constructor that takes O: a WatchOption
// is one of each.
func as[O etcd.StoreOption](opts []etcd.WatchOption, extra []O) []O {
	out := make([]O, 0, len(opts)+len(extra))
	for _, o := range opts {
		out = append(out, any(o).(O))
	}
	return append(out, extra...)
}

// Fast returns a Store's options (etcd.Open, etcd.NewStore) for tests:
// lease TTL 2s and Watch's, followed by extra.
func Fast(extra ...etcd.StoreOption) []etcd.StoreOption {
	return as(watch(), append([]etcd.StoreOption{etcd.WithTTL(ttl)}, extra...))
}

// Registrar returns a Registrar's options for tests: lease TTL 2s and
// Watch's, followed by extra.
func Registrar(extra ...etcd.RegistrarOption) []etcd.RegistrarOption {
	return as(watch(), append([]etcd.RegistrarOption{etcd.WithTTL(ttl)}, extra...))
}

// Discovery returns a Discovery's options for tests: Watch's, followed by
// extra.
func Discovery(extra ...etcd.DiscoveryOption) []etcd.DiscoveryOption {
	return as(watch(), extra)
}

// Watch returns the options of what watches etcd (etcd.NewCanaries,
// etcd.NewPolicies) for tests: backoff 50ms to 500ms, request timeout 2s,
// progress interval 200ms, logs discarded, followed by extra.
func Watch(extra ...etcd.WatchOption) []etcd.WatchOption {
	return append(watch(), extra...)
}

// Write returns an operator write's options (etcd.SetOverride,
// etcd.SetCanary, etcd.SetPolicy and the others) for tests: request
// timeout 2s, followed by extra.
func Write(extra ...etcd.WriteOption) []etcd.WriteOption {
	return append([]etcd.WriteOption{etcd.WithRequestTimeout(2 * time.Second)}, extra...)
}
