package etcd

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// Mirror writes an instance again in another layout, so that clients that
// read that layout (another framework's, during a migration) find it too
// (WithMirror).
type Mirror interface {
	// Mirror returns the key and value of in in the other layout. The key
	// must depend only on in's Name and ID, so that a re-registration
	// rewrites the same key. It is called by Register, with a valid,
	// normalized instance; an error fails that Register.
	Mirror(in registry.Instance) (key string, value []byte, err error)
}

// WithMirror makes a Registrar also write each instance with every mirror,
// under the same lease and in the same transaction as its own key: the
// copies are rewritten with the key after a lost lease, deleted with it by
// Deregister, and gone with the lease on Close or expiry. The audit
// (WithAuditInterval) writes an instance again when one of its copies is
// missing. By default nothing is mirrored; a nil mirror is an error.
// NewRegistrar, Open and NewStore take it.
func WithMirror(mirrors ...Mirror) RegistrarOption {
	return registrarOnly{func(o *options) {
		for _, m := range mirrors {
			if m == nil {
				o.invalid("WithMirror: a mirror must not be nil")
				return
			}
		}
		o.mirrors = append(o.mirrors, mirrors...)
	}}
}

// mirrored is one copy of an entry in another layout.
type mirrored struct {
	key string
	val []byte
}

// mirrorsOf returns the copies of in the registrar's mirrors write.
func (l *loop) mirrorsOf(in registry.Instance) ([]mirrored, error) {
	if len(l.opts.mirrors) == 0 {
		return nil, nil
	}
	out := make([]mirrored, 0, len(l.opts.mirrors))
	for _, m := range l.opts.mirrors {
		key, val, err := m.Mirror(in)
		if err != nil {
			return nil, fmt.Errorf("etcd: mirror %s/%s: %w", in.Name, in.ID, err)
		}
		out = append(out, mirrored{key: key, val: val})
	}
	return out, nil
}

// size returns the bytes of the keys and values of e and its copies.
func (e *entry) size() int {
	n := len(e.key) + len(e.val)
	for _, m := range e.mirrors {
		n += len(m.key) + len(m.val)
	}
	return n
}

// putOps returns the operations writing e and its copies under lease.
func (e *entry) putOps(lease clientv3.LeaseID) []clientv3.Op {
	ops := make([]clientv3.Op, 0, 1+len(e.mirrors))
	ops = append(ops, clientv3.OpPut(e.key, string(e.val), clientv3.WithLease(lease)))
	for _, m := range e.mirrors {
		ops = append(ops, clientv3.OpPut(m.key, string(m.val), clientv3.WithLease(lease)))
	}
	return ops
}

// mirrorDeletes returns the operations deleting each copy of e that is
// still bound to lease (nil e: none).
func (e *entry) mirrorDeletes(lease clientv3.LeaseID) []clientv3.Op {
	if e == nil {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(e.mirrors))
	for _, m := range e.mirrors {
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(m.key), "=", lease)},
			[]clientv3.Op{clientv3.OpDelete(m.key)}, nil))
	}
	return ops
}

// mirrorsAttached reports whether every copy of e is among the keys
// attached to the lease.
func (e *entry) mirrorsAttached(attached map[string]struct{}) bool {
	for _, m := range e.mirrors {
		if _, ok := attached[m.key]; !ok {
			return false
		}
	}
	return true
}
