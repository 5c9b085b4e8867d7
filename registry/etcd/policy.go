package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// SetPolicy writes the call policy of service (see registry.Policy) under
// registry.PolicyKey, replacing the one stored. p is validated first: a
// field out of its range is a *registry.FieldError naming it, and the zero
// Policy, which sets nothing, is an error (ClearPolicy removes a policy).
// The stored value is normalized (the defaults of the fields p uses filled
// in). With WithBy it also records who set it, from where (WithSource),
// as "alice (console)", and now, in UTC (registry.PolicyInfo), which
// clients ignore; without WithBy it records neither. The policy is bound
// to no lease: it stays until ClearPolicy. The write is traced: its
// registry.Record lands in the service's journal in the same transaction
// (see History).
func SetPolicy(ctx context.Context, cli *clientv3.Client, service string, p registry.Policy, opts ...WriteOption) error {
	if p.IsZero() {
		return fmt.Errorf("etcd: set policy of %s: the zero Policy sets nothing; use ClearPolicy to remove a policy", service)
	}
	op, key, err := policyKey(opts, service)
	if err != nil {
		return err
	}
	info := registry.PolicyInfo{Policy: p}
	if op.by != "" {
		info.SetBy, info.SetAt = op.by+" ("+op.source+")", time.Now().UTC()
	}
	val, err := registry.MarshalPolicyInfo(info)
	if err != nil {
		return err
	}
	if err := putSetting(ctx, cli, op, registry.ActionPolicySet, service, key, val); err != nil {
		return fmt.Errorf("etcd: write policy %s: %w", key, err)
	}
	return nil
}

// GetPolicy reads the call policy of service. It returns false, and the
// zero Policy, when none is stored. A stored value that does not decode is
// an error matching what registry.UnmarshalPolicy returns
// (registry.ErrMalformedValue, registry.ErrUnsupportedVersion or
// registry.ErrInvalidInstance).
func GetPolicy(ctx context.Context, cli *clientv3.Client, service string, opts ...Option) (registry.Policy, bool, error) {
	val, ok, err := getPolicy(ctx, cli, service, opts)
	if err != nil || !ok {
		return registry.Policy{}, false, err
	}
	p, err := registry.UnmarshalPolicy(val.value)
	if err != nil {
		return registry.Policy{}, false, fmt.Errorf("etcd: policy %s: %w", val.key, err)
	}
	return p, true, nil
}

// GetPolicyInfo is GetPolicy with who set the policy and when, as
// SetPolicy recorded them with WithBy (empty when it was set without): for
// operators' views. A stored value that does not decode is an error matching what
// registry.UnmarshalPolicyInfo returns.
func GetPolicyInfo(ctx context.Context, cli *clientv3.Client, service string, opts ...Option) (registry.PolicyInfo, bool, error) {
	val, ok, err := getPolicy(ctx, cli, service, opts)
	if err != nil || !ok {
		return registry.PolicyInfo{}, false, err
	}
	info, err := registry.UnmarshalPolicyInfo(val.value)
	if err != nil {
		return registry.PolicyInfo{}, false, fmt.Errorf("etcd: policy %s: %w", val.key, err)
	}
	return info, true, nil
}

// storedValue is a value read from etcd and its key.
type storedValue struct {
	key   string
	value []byte
}

// getPolicy reads the stored policy value of service; false if none.
func getPolicy(ctx context.Context, cli *clientv3.Client, service string, opts []Option) (storedValue, bool, error) {
	op, key, err := policyKey(opts, service)
	if err != nil {
		return storedValue{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return storedValue{}, false, fmt.Errorf("etcd: read policy %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return storedValue{}, false, nil
	}
	return storedValue{key: key, value: resp.Kvs[0].Value}, true, nil
}

// ClearPolicy removes the call policy of service, if any: clients keep
// their own defaults again. It is traced as SetPolicy is; without a policy
// it writes nothing.
func ClearPolicy(ctx context.Context, cli *clientv3.Client, service string, opts ...WriteOption) error {
	return clearSetting(ctx, cli, "policy", registry.ActionPolicyClear, registry.PolicyKey, service, opts)
}

func policyKey[O StoreOption](opts []O, service string) (options, string, error) {
	return settingKey(opts, registry.PolicyKey, service)
}
