package main

import (
	"context"
	"fmt"
	"io"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/zookeeper"
)

// settingStore is where "muster canary" and "muster policy" read and
// write a service's settings: etcd, or ZooKeeper with --registry zk://.
// Its errors say what failed and where.
type settingStore interface {
	canary(ctx context.Context, service string) (registry.Canary, bool, error)
	setCanary(ctx context.Context, service string, c registry.Canary) error
	clearCanary(ctx context.Context, service string) error
	policy(ctx context.Context, service string) (registry.PolicyInfo, bool, error)
	// setPolicy records by as who set it where the store keeps that.
	setPolicy(ctx context.Context, service string, p registry.Policy, by string) error
	clearPolicy(ctx context.Context, service string) error
	// fail wraps the error of what.
	fail(ctx context.Context, what string, err error) error
}

// etcdSettings is settingStore on etcd.
type etcdSettings struct {
	g *globalOptions
	s *session
}

// openSettings connects to etcd for a setting command; close it after.
func openSettings(ctx context.Context, g *globalOptions, stderr io.Writer) (*etcdSettings, error) {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return nil, err
	}
	return &etcdSettings{g: g, s: s}, nil
}

func (e *etcdSettings) close() { e.s.Close() }

func (e *etcdSettings) opts() []etcd.Option {
	return e.g.writeOpts()
}

func (e *etcdSettings) canary(ctx context.Context, service string) (registry.Canary, bool, error) {
	tctx, cancel := context.WithTimeout(ctx, e.g.timeout)
	defer cancel()
	key := registry.CanaryKey(e.g.prefix, service)
	resp, err := e.s.cli.Get(tctx, key)
	if err != nil {
		return registry.Canary{}, false, e.fail(ctx, "read the canary of "+service, err)
	}
	if len(resp.Kvs) == 0 {
		return registry.Canary{}, false, nil
	}
	c, err := registry.UnmarshalCanary(resp.Kvs[0].Value)
	if err != nil {
		return registry.Canary{}, false, fmt.Errorf("the canary of %s at %s: %w", service, key, err)
	}
	return c, true, nil
}

func (e *etcdSettings) setCanary(ctx context.Context, service string, c registry.Canary) error {
	return e.fail(ctx, "set the canary of "+service, etcd.SetCanary(ctx, e.s.cli, service, c, e.opts()...))
}

func (e *etcdSettings) clearCanary(ctx context.Context, service string) error {
	return e.fail(ctx, "clear the canary of "+service, etcd.ClearCanary(ctx, e.s.cli, service, e.opts()...))
}

func (e *etcdSettings) policy(ctx context.Context, service string) (registry.PolicyInfo, bool, error) {
	return etcd.GetPolicyInfo(ctx, e.s.cli, service, e.opts()...)
}

func (e *etcdSettings) setPolicy(ctx context.Context, service string, p registry.Policy, by string) error {
	return e.fail(ctx, "set the policy of "+service, etcd.SetPolicy(ctx, e.s.cli, service, p, append(e.opts(), etcd.WithSetBy(by))...))
}

func (e *etcdSettings) clearPolicy(ctx context.Context, service string) error {
	return e.fail(ctx, "clear the policy of "+service, etcd.ClearPolicy(ctx, e.s.cli, service, e.opts()...))
}

func (e *etcdSettings) fail(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	return e.g.etcdError(ctx, what, err)
}

// zkSettings is settingStore on ZooKeeper; it records no setter.
type zkSettings struct {
	z    *zkSession
	opts []zookeeper.Option
}

func (s zkSettings) canary(ctx context.Context, service string) (registry.Canary, bool, error) {
	c, ok, err := zookeeper.GetCanary(ctx, s.z.servers, service, s.opts...)
	return c, ok, s.fail(ctx, "read the canary of "+service, err)
}

func (s zkSettings) setCanary(ctx context.Context, service string, c registry.Canary) error {
	return s.fail(ctx, "set the canary of "+service, zookeeper.SetCanary(ctx, s.z.servers, service, c, s.opts...))
}

func (s zkSettings) clearCanary(ctx context.Context, service string) error {
	return s.fail(ctx, "clear the canary of "+service, zookeeper.ClearCanary(ctx, s.z.servers, service, s.opts...))
}

func (s zkSettings) policy(ctx context.Context, service string) (registry.PolicyInfo, bool, error) {
	p, ok, err := zookeeper.GetPolicy(ctx, s.z.servers, service, s.opts...)
	return registry.PolicyInfo{Policy: p}, ok, err
}

func (s zkSettings) setPolicy(ctx context.Context, service string, p registry.Policy, _ string) error {
	return s.fail(ctx, "set the policy of "+service, zookeeper.SetPolicy(ctx, s.z.servers, service, p, s.opts...))
}

func (s zkSettings) clearPolicy(ctx context.Context, service string) error {
	return s.fail(ctx, "clear the policy of "+service, zookeeper.ClearPolicy(ctx, s.z.servers, service, s.opts...))
}

func (s zkSettings) fail(_ context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	return s.z.fail(what, err)
}
