package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// ErrNoInstance is returned by SetOverride and ClearOverride when the
// instance is not registered. It matches registry.ErrNoInstance.
var ErrNoInstance = fmt.Errorf("etcd: %w", registry.ErrNoInstance)

// SetOverride writes an operator's override of one registered instance
// (drain it, change its weight); every Discovery merges it into the
// instance within its normal convergence time. The override is bound to the
// instance's lease, so it leaves with the instance, and the instance's
// registrar keeps it across re-registrations. The write is traced: its
// registry.Record (action drain for weight 0, else weight) lands in the
// service's journal in the same transaction (see History). Of the options
// only WithPrefix, WithRequestTimeout, WithBy, WithSource and
// WithJournalSize apply. It fails with ErrNoInstance if the instance is not
// registered.
func SetOverride(ctx context.Context, cli *clientv3.Client, service, id string, o registry.Override, opts ...WriteOption) error {
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
	action := registry.ActionWeight
	if o.Weight != nil && *o.Weight == 0 {
		action = registry.ActionDrain
	}
	okey := key + "/" + registry.OverrideSuffix
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	_, err = journaled(ctx, cli, op, tracedWrite{service: service, instance: id, reads: []string{key, okey},
		plan: func(kvs []*mvccpb.KeyValue) (writePlan, error) {
			if kvs[0] == nil {
				return writePlan{}, fmt.Errorf("%w: %s/%s", ErrNoInstance, service, id)
			}
			// Written only while the instance still holds the lease
			// read: the commit is guarded by the instance's revision.
			return writePlan{action: action, before: valueOf(kvs[1]), after: val,
				ops: []clientv3.Op{clientv3.OpPut(okey, string(val), clientv3.WithLease(clientv3.LeaseID(kvs[0].Lease)))}}, nil
		}})
	if err != nil && !errors.Is(err, ErrNoInstance) {
		return fmt.Errorf("etcd: write override of %s: %w", key, err)
	}
	return err
}

// ClearOverride removes an operator's override of an instance, if any,
// traced as SetOverride is (action undrain); without an override it
// writes nothing.
func ClearOverride(ctx context.Context, cli *clientv3.Client, service, id string, opts ...WriteOption) error {
	op := buildOptions(opts)
	if op.err != nil {
		return op.err
	}
	key, err := instanceKey(op, service, id)
	if err != nil {
		return err
	}
	okey := key + "/" + registry.OverrideSuffix
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	_, err = journaled(ctx, cli, op, tracedWrite{service: service, instance: id, reads: []string{okey},
		plan: func(kvs []*mvccpb.KeyValue) (writePlan, error) {
			if kvs[0] == nil {
				return writePlan{skip: true}, nil
			}
			return writePlan{action: registry.ActionUndrain, before: kvs[0].Value, ops: []clientv3.Op{clientv3.OpDelete(okey)}}, nil
		}})
	if err != nil {
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
// SetOverride instead. The removal is traced as SetOverride is (action
// deregister, the instance's value before).
// Deleting an instance that is not registered is not an error, and writes
// nothing.
func Delete(ctx context.Context, cli *clientv3.Client, service, id string, opts ...WriteOption) error {
	op := buildOptions(opts)
	if op.err != nil {
		return op.err
	}
	key, err := instanceKey(op, service, id)
	if err != nil {
		return err
	}
	okey := key + "/" + registry.OverrideSuffix
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	_, err = journaled(ctx, cli, op, tracedWrite{service: service, instance: id, reads: []string{key, okey},
		plan: func(kvs []*mvccpb.KeyValue) (writePlan, error) {
			if kvs[0] == nil && kvs[1] == nil {
				return writePlan{skip: true}, nil
			}
			return writePlan{action: registry.ActionDeregister, before: valueOf(kvs[0]),
				ops: []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(okey)}}, nil
		}})
	if err != nil {
		return fmt.Errorf("etcd: delete %s: %w", key, err)
	}
	return nil
}
