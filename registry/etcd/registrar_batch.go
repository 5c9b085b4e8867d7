package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The run loop writes in transactions of many instances: one Txn puts up to
// WithMaxTxnOps operations (an instance's key and its copies, WithMirror,
// always in the same Txn), and one deletes as many deregistered keys. etcd
// applies a Txn as one request, so 10,000 instances cost ~80 requests, not
// 10,000.

const (
	// defaultMaxTxnOps is etcd's own default limit of operations in one
	// transaction (--max-txn-ops).
	defaultMaxTxnOps = 128
	// maxBatchBytes bounds the keys and values of one transaction: half
	// the request limit muster serve sets and docs/SECURITY.md
	// recommends (--max-request-bytes 512 KiB, internal/embedetcd's
	// MaxRequestBytes; etcd's default is 1.5 MiB), leaving the rest for
	// the framing of up to 128 operations. A transaction of many instances
	// then never meets the limit; an instance larger than this goes alone.
	maxBatchBytes = 256 << 10
)

// WithMaxTxnOps sets how many operations a Registrar puts in one etcd
// transaction when it writes or deletes many instances at once (an
// instance's key, each of its copies (WithMirror), and, after a lost
// lease, the read of its override count one each). The default is 128,
// etcd's default --max-txn-ops; n below 1 is an error. A transaction etcd
// refuses as too large is split, and the registrar keeps to half the
// refused size from then on. NewRegistrar, Open and NewStore take it.
func WithMaxTxnOps(n int) RegistrarOption {
	return registrarOnly{func(o *options) {
		if n < 1 {
			o.invalid("WithMaxTxnOps(%d): a transaction must hold at least 1 operation", n)
			return
		}
		o.maxTxnOps = n
	}}
}

// txnCost is what one item (an instance to put, a key to delete) adds to a
// transaction.
type txnCost struct {
	// ops is the number of operations it adds to the transaction's
	// top level.
	ops int
	// depth is the number of operations of its nested transactions, on
	// their deepest path: etcd counts each nesting level against what
	// the levels above left of the limit.
	depth int
	// bytes is the size of its keys and values.
	bytes int
}

// batches splits items, in order, into groups that each fit one
// transaction: top-level operations plus the deepest nesting at most
// limit, keys and values at most maxBytes. An item that does not fit alone
// is a group of its own (etcd then refuses it, for that item alone).
func batches[T any](items []T, cost func(T) txnCost, limit, maxBytes int) [][]T {
	var out [][]T
	start, ops, depth, size := 0, 0, 0, 0
	for i, it := range items {
		c := cost(it)
		if i > start && (ops+c.ops+max(depth, c.depth) > limit || size+c.bytes > maxBytes) {
			out = append(out, items[start:i])
			start, ops, depth, size = i, 0, 0, 0
		}
		ops += c.ops
		depth = max(depth, c.depth)
		size += c.bytes
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// batchWrite is one kind of write of the run loop, done in transactions of
// many items.
type batchWrite[T any] struct {
	cost func(T) txnCost
	// commit writes items in one transaction and records the result.
	commit func(items []T) error
	// refused handles etcd's refusal of a single item for its content
	// (permanent); it returns the error to report, if any.
	refused func(item T, err error) error
}

// writeInBatches writes items in transactions of at most the loop's limit
// of operations. A transaction etcd refuses for its content (too many
// operations, too large, a duplicate or a forbidden key) is split in
// halves, down to single items, so one item's refusal does not hold back
// the others; on a refusal for too many operations the limit drops to half
// the refused size. After an error that concerns every write (the lease
// lost, etcd unreachable, Close) it stops at once; after another error it
// goes on with the other transactions and returns the first error.
// Called by the run loop only.
func writeInBatches[T any](l *loop, items []T, w batchWrite[T]) error {
	var first error
	for _, b := range batches(items, w.cost, l.txnOps, maxBatchBytes) {
		err := w.commit(b)
		switch {
		case err == nil || !permanent(err):
		case len(b) == 1:
			err = w.refused(b[0], err)
		default:
			if errors.Is(err, rpctypes.ErrTooManyOps) {
				ops, depth := 0, 0
				for _, it := range b {
					c := w.cost(it)
					ops, depth = ops+c.ops, max(depth, c.depth)
				}
				l.lowerTxnOps(ops+depth, err)
			}
			half := len(b) / 2
			err = writeInBatches(l, b[:half], w)
			if err == nil || !stopsWrites(err) {
				err = errors.Join(err, writeInBatches(l, b[half:], w))
			}
		}
		if err == nil {
			continue
		}
		if stopsWrites(err) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// lowerTxnOps makes the loop's limit of operations per transaction half
// of refused, the size of a transaction etcd refused as too large (err),
// unless it is lower already. Called by the run loop only.
func (l *loop) lowerTxnOps(refused int, err error) {
	limit := max(refused/2, 1)
	if limit >= l.txnOps {
		return
	}
	l.log.Warn("etcd refused a transaction as too large; writing fewer operations per transaction",
		"refused_ops", refused, "ops", limit, "error", err)
	l.txnOps = limit
}

// stopsWrites reports whether err concerns every write of the attempt:
// the lease is lost, etcd does not answer, or the registrar is closing.
func stopsWrites(err error) bool {
	return errors.Is(err, errLeaseLost) || errors.Is(err, context.Canceled) || unreachable(err)
}

// describeKeys names the keys of a transaction in an error.
func describeKeys(keys []string) string {
	switch len(keys) {
	case 0:
		return "no key"
	case 1:
		return keys[0]
	default:
		return fmt.Sprintf("%d keys (%s, ...)", len(keys), keys[0])
	}
}
