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

const (
	ttl            = 2 * time.Second // the lease TTL of Fast and Registrar
	requestTimeout = 2 * time.Second // every etcd request's bound
)

// watch returns the options of everything that watches etcd: backoff 50ms
// to 500ms, request timeout 2s, progress interval 200ms, logs discarded.
func watch() []etcd.WatchOption {
	return []etcd.WatchOption{
		etcd.WithBackoff(50*time.Millisecond, 500*time.Millisecond),
		etcd.WithRequestTimeout(requestTimeout),
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
	return append([]etcd.WriteOption{etcd.WithRequestTimeout(requestTimeout)}, extra...)
}

// Read returns the options of a read (etcd.GetPolicy, etcd.GetPolicyInfo,
// etcd.History) for tests: request timeout 2s, followed by extra.
func Read(extra ...etcd.Option) []etcd.Option {
	return append([]etcd.Option{etcd.WithRequestTimeout(requestTimeout)}, extra...)
}
