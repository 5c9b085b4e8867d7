package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// SetPolicy writes the call policy of service (see registry.Policy) under
// registry.PolicyKey, replacing the one stored. p is validated first: a
// field out of its range is a *registry.FieldError naming it, and the zero
// Policy, which sets nothing, is an error (ClearPolicy removes a policy).
// The stored value is normalized (the defaults of the fields p uses filled
// in). The policy is bound to no lease: it stays until ClearPolicy. Of the
// options only WithPrefix and WithRequestTimeout apply.
func SetPolicy(ctx context.Context, cli *clientv3.Client, service string, p registry.Policy, opts ...Option) error {
	if p.IsZero() {
		return fmt.Errorf("etcd: set policy of %s: the zero Policy sets nothing; use ClearPolicy to remove a policy", service)
	}
	val, err := registry.MarshalPolicy(p)
	if err != nil {
		return err
	}
	op, key, err := policyKey(opts, service)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	if _, err := cli.Put(ctx, key, string(val)); err != nil {
		return fmt.Errorf("etcd: write policy %s: %w", key, err)
	}
	return nil
}

// GetPolicy reads the call policy of service. It returns false, and the
// zero Policy, when none is stored. A stored value that does not decode is
// an error matching what registry.UnmarshalPolicy returns
// (registry.ErrMalformedValue, registry.ErrUnsupportedVersion or
// registry.ErrInvalidInstance). Of the options only WithPrefix and
// WithRequestTimeout apply.
func GetPolicy(ctx context.Context, cli *clientv3.Client, service string, opts ...Option) (registry.Policy, bool, error) {
	op, key, err := policyKey(opts, service)
	if err != nil {
		return registry.Policy{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return registry.Policy{}, false, fmt.Errorf("etcd: read policy %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return registry.Policy{}, false, nil
	}
	p, err := registry.UnmarshalPolicy(resp.Kvs[0].Value)
	if err != nil {
		return registry.Policy{}, false, fmt.Errorf("etcd: policy %s: %w", key, err)
	}
	return p, true, nil
}

// ClearPolicy removes the call policy of service, if any: clients keep
// their own defaults again. Of the options only WithPrefix and
// WithRequestTimeout apply.
func ClearPolicy(ctx context.Context, cli *clientv3.Client, service string, opts ...Option) error {
	return clearSetting(ctx, cli, "policy", registry.PolicyKey, service, opts)
}

func policyKey(opts []Option, service string) (options, string, error) {
	return settingKey(opts, registry.PolicyKey, service)
}
