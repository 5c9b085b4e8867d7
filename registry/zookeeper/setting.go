package zookeeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/internal/settingfeed"
	"github.com/musterhq/muster/registry"
)

// A service's settings (its canary, its call policy) are persistent nodes
// beside the services' root, at the paths of the etcd backend's keys
// (registry.CanaryKey, registry.PolicyKey: <root>.canary/<service>,
// <root>.policy/<service>), bound to no session: they stay until cleared.

// SetCanary writes an operator's canary setting of service (see
// registry.Canary) for every client that follows it (NewCanaries with
// resolver.WithCanaries). Of the options only WithRoot, WithSessionTimeout,
// WithRequestTimeout and WithLogger apply.
func SetCanary(ctx context.Context, servers []string, service string, c registry.Canary, opts ...Option) error {
	val, err := registry.MarshalCanary(c)
	if err != nil {
		return err
	}
	return writeSetting(ctx, servers, "canary", registry.CanaryKey, service, val, opts)
}

// GetCanary reads the canary setting of service. It returns false, and the
// zero Canary, when none is stored; a stored value that does not decode is
// an error matching what registry.UnmarshalCanary returns. Of the options
// only WithRoot, WithSessionTimeout, WithRequestTimeout and WithLogger
// apply.
func GetCanary(ctx context.Context, servers []string, service string, opts ...Option) (registry.Canary, bool, error) {
	return getSetting(ctx, servers, "canary", registry.CanaryKey, service, registry.UnmarshalCanary, opts)
}

// ClearCanary removes the canary setting of service, if any. Of the
// options only WithRoot, WithSessionTimeout, WithRequestTimeout and
// WithLogger apply.
func ClearCanary(ctx context.Context, servers []string, service string, opts ...Option) error {
	return writeSetting(ctx, servers, "canary", registry.CanaryKey, service, nil, opts)
}

// SetPolicy writes the call policy of service (see registry.Policy),
// validated first: a field out of its range is a *registry.FieldError
// naming it, and the zero Policy, which sets nothing, is an error
// (ClearPolicy removes a policy). The stored value is normalized, as the
// etcd backend's. Of the options only WithRoot, WithSessionTimeout,
// WithRequestTimeout and WithLogger apply.
func SetPolicy(ctx context.Context, servers []string, service string, p registry.Policy, opts ...Option) error {
	if p.IsZero() {
		return fmt.Errorf("zookeeper: set policy of %s: the zero Policy sets nothing; use ClearPolicy to remove a policy", service)
	}
	val, err := registry.MarshalPolicy(p)
	if err != nil {
		return err
	}
	return writeSetting(ctx, servers, "policy", registry.PolicyKey, service, val, opts)
}

// GetPolicy reads the call policy of service. It returns false, and the
// zero Policy, when none is stored; a stored value that does not decode is
// an error matching what registry.UnmarshalPolicy returns. Of the options
// only WithRoot, WithSessionTimeout, WithRequestTimeout and WithLogger
// apply.
func GetPolicy(ctx context.Context, servers []string, service string, opts ...Option) (registry.Policy, bool, error) {
	return getSetting(ctx, servers, "policy", registry.PolicyKey, service, registry.UnmarshalPolicy, opts)
}

// getSetting reads the setting what of service at pathOf's path; false
// when there is none.
func getSetting[T any](ctx context.Context, servers []string, what string, pathOf func(root, service string) string,
	service string, decode func([]byte) (T, error), opts []Option) (T, bool, error) {
	var zero T
	var val []byte
	err := onSetting(ctx, servers, pathOf, service, opts, func(c *zk.Conn, p string) error {
		data, _, err := c.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		val = data
		if val == nil {
			val = []byte{} // a node with no value does not decode
		}
		return err
	})
	if err != nil || val == nil {
		return zero, false, wrapSetting("read", what, service, err)
	}
	v, err := decode(val)
	if err != nil {
		return zero, false, fmt.Errorf("zookeeper: %s of %s: %w", what, service, err)
	}
	return v, true, nil
}

// ClearPolicy removes the call policy of service, if any: clients keep
// their own defaults again. Of the options only WithRoot,
// WithSessionTimeout, WithRequestTimeout and WithLogger apply.
func ClearPolicy(ctx context.Context, servers []string, service string, opts ...Option) error {
	return writeSetting(ctx, servers, "policy", registry.PolicyKey, service, nil, opts)
}

// writeSetting stores val as the setting what of service at pathOf's path,
// creating the node (and its parents) when missing; a nil val deletes it.
func writeSetting(ctx context.Context, servers []string, what string, pathOf func(root, service string) string,
	service string, val []byte, opts []Option) error {
	err := onSetting(ctx, servers, pathOf, service, opts, func(c *zk.Conn, p string) error {
		if val == nil {
			if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			return nil
		}
		for {
			_, err := c.Set(p, val, -1)
			if !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			if err := ensurePath(c, path.Dir(p)); err != nil {
				return err
			}
			_, err = c.Create(p, val, 0, zk.WorldACL(zk.PermAll))
			if !errors.Is(err, zk.ErrNodeExists) {
				return err // created, or failed; else created meanwhile: set it
			}
		}
	})
	op := "write"
	if val == nil {
		op = "delete"
	}
	return wrapSetting(op, what, service, err)
}

// onSetting runs f on a connection of its own (oneShot) with the path of
// service's setting.
func onSetting(ctx context.Context, servers []string, pathOf func(root, service string) string, service string,
	opts []Option, f func(c *zk.Conn, path string) error) error {
	if err := registry.ValidateName(service); err != nil {
		return err
	}
	return oneShot(ctx, servers, opts, func(ctx context.Context, c *zk.Conn, o options) error {
		p := pathOf(o.root, service)
		return call(ctx, func() error { return f(c, p) })
	})
}

func wrapSetting(op, what, service string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("zookeeper: %s %s of %s: %w", op, what, service, err)
}

// Canaries follows the canary settings stored by SetCanary over a
// Discovery's connection, for resolver.WithCanaries.
type Canaries struct{ d *Discovery }

var _ registry.CanarySource = (*Canaries)(nil)

// NewCanaries returns a Canaries following settings over d's connection
// (and its session, its reconnections and its root).
func NewCanaries(d *Discovery) (*Canaries, error) {
	if d == nil {
		return nil, errors.New("zookeeper: NewCanaries: nil Discovery")
	}
	return &Canaries{d: d}, nil
}

// WatchCanary implements registry.CanarySource with a data watch on the
// setting's node (an existence watch while there is none), read again
// each time it fires; see followSetting. A value that does not decode is
// logged and read as no canary. The channel is also closed when the
// Discovery is.
func (c *Canaries) WatchCanary(ctx context.Context, service string) <-chan registry.Canary {
	ch := make(chan registry.Canary, 1)
	go followSetting(ctx, c.d, "canary", registry.CanaryKey(c.d.o.root, service), registry.UnmarshalCanary, ch)
	return ch
}

// Policies follows the call policies stored by SetPolicy over a
// Discovery's connection, for resolver.WithPolicies and the xDS control
// plane.
type Policies struct{ d *Discovery }

var _ registry.PolicySource = (*Policies)(nil)

// NewPolicies returns a Policies following settings over d's connection.
func NewPolicies(d *Discovery) (*Policies, error) {
	if d == nil {
		return nil, errors.New("zookeeper: NewPolicies: nil Discovery")
	}
	return &Policies{d: d}, nil
}

// WatchPolicy implements registry.PolicySource, as WatchCanary does for
// canaries. A value that does not decode is logged and read as no policy.
func (p *Policies) WatchPolicy(ctx context.Context, service string) <-chan registry.Policy {
	ch := make(chan registry.Policy, 1)
	go followSetting(ctx, p.d, "policy", registry.PolicyKey(p.d.o.root, service), registry.UnmarshalPolicy, ch)
	return ch
}

// followSetting follows the setting what at path over d's connection and
// sends it on ch, decoded, when first read and after each change (the zero
// T when there is none, or when the value does not decode, which is
// logged). Each read sets a watch (a data watch, or an existence watch
// while the node is missing) and the next read waits for it to fire. The
// client library keeps the watch across reconnections (and moves off a
// silent server within 2/3 of the session timeout, setting its watches
// again there); after a session expiry it reports the watch gone, which
// reads again. While ZooKeeper is unreachable the last value stands, as
// the instances' last list does. A failed read is retried with backoff.
// ch coalesces; it is closed when ctx ends or d is closed.
func followSetting[T any](ctx context.Context, d *Discovery, what, path string, decode func([]byte) (T, error), ch chan T) {
	defer close(ch)
	var last []byte
	published := false
	publish := func(val []byte) {
		if published && bytes.Equal(val, last) && (val == nil) == (last == nil) {
			return
		}
		published, last = true, val
		settingfeed.Send(ch, val, decode, func(err error) {
			d.log.Error("ignoring a bad "+what+" setting", "path", path, "error", err)
		})
	}
	bo := backoff.New(defaultBackoffMin, defaultBackoffMax)
	for ctx.Err() == nil {
		var val []byte
		var fired <-chan zk.Event
		err := call(ctx, func() error {
			var err error
			val, fired, err = readSetting(d.conn.Conn, path)
			return err
		})
		if err == nil {
			bo.Reset()
			publish(val)
			select {
			case <-ctx.Done():
				return
			case <-d.closed:
				return
			case <-fired:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := bo.Next()
		d.log.Warn("cannot follow the "+what+" setting; reading it again", "path", path, "error", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-d.closed:
			return
		case <-time.After(wait):
		}
	}
}

// readSetting reads the node at path with a watch on it: its value (an
// empty one for a node without, nil when there is no node) and the watch's
// channel.
func readSetting(c *zk.Conn, path string) ([]byte, <-chan zk.Event, error) {
	for {
		val, _, fired, err := c.GetW(path)
		if err == nil {
			if val == nil {
				val = []byte{}
			}
			return val, fired, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, err
		}
		exists, _, fired, err := c.ExistsW(path)
		if err != nil {
			return nil, nil, err
		}
		if !exists {
			return nil, fired, nil
		}
		// Created between the two reads: read it (its existence watch
		// fires at its next change, unread).
	}
}
