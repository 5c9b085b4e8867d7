package etcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// ErrNoInstance is returned by SetOverride and ClearOverride when the
// instance is not registered.
var ErrNoInstance = errors.New("etcd: no such instance")

// SetOverride writes an operator's override of one registered instance
// (drain it, change its weight); every Discovery merges it into the
// instance within its normal convergence time. The override is bound to the
// instance's lease, so it leaves with the instance, and the instance's
// registrar keeps it across re-registrations. Of the options only
// WithPrefix and WithRequestTimeout apply. It fails with ErrNoInstance if
// the instance is not registered.
func SetOverride(ctx context.Context, cli *clientv3.Client, service, id string, o registry.Override, opts ...Option) error {
	val, err := registry.MarshalOverride(o)
	if err != nil {
		return err
	}
	op := buildOptions(opts)
	if op.err != nil {
		return op.err
	}
	key, err := instanceKey(op, service, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("etcd: read %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: %s/%s", ErrNoInstance, service, id)
		}
		kv := resp.Kvs[0]
		// Written only while the instance still holds the lease read.
		tr, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key+"/"+registry.OverrideSuffix, string(val), clientv3.WithLease(clientv3.LeaseID(kv.Lease)))).
			Commit()
		if err != nil {
			return fmt.Errorf("etcd: write override of %s: %w", key, err)
		}
		if tr.Succeeded {
			return nil
		}
		// The instance was rewritten meanwhile (perhaps under a new
		// lease): read it again.
	}
}

// ClearOverride removes an operator's override of an instance, if any. Of
// the options only WithPrefix and WithRequestTimeout apply.
func ClearOverride(ctx context.Context, cli *clientv3.Client, service, id string, opts ...Option) error {
	op := buildOptions(opts)
	if op.err != nil {
		return op.err
	}
	key, err := instanceKey(op, service, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	if _, err := cli.Delete(ctx, key+"/"+registry.OverrideSuffix); err != nil {
		return fmt.Errorf("etcd: delete override of %s: %w", key, err)
	}
	return nil
}

func instanceKey(o options, service, id string) (string, error) {
	if err := registry.ValidateName(service); err != nil {
		return "", err
	}
	if err := registry.ValidateID(id); err != nil {
		return "", err
	}
	return registry.Key(o.prefix, service, id), nil
}

// Delete removes one instance's key and its override, whatever lease holds
// them: an operator's removal of an entry. The instance's registrar, if it
// is alive, owns the key and writes it again within about a second (see
// Registrar): to take a live instance out of traffic, drain it with
// SetOverride instead. Of the options only WithPrefix and WithRequestTimeout apply.
// Deleting an instance that is not registered is not an error.
func Delete(ctx context.Context, cli *clientv3.Client, service, id string, opts ...Option) error {
	op := buildOptions(opts)
	if op.err != nil {
		return op.err
	}
	key, err := instanceKey(op, service, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(key), clientv3.OpDelete(key+"/"+registry.OverrideSuffix)).Commit(); err != nil {
		return fmt.Errorf("etcd: delete %s: %w", key, err)
	}
	return nil
}
