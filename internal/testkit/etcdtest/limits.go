package etcdtest

// WithMaxTxnOps sets the most operations the members accept in one
// transaction (etcd's --max-txn-ops, default 128), so that a test can make
// etcd refuse a transaction as too large ("too many operations in txn
// request") with few keys. Start fails the test for n < 1.
func WithMaxTxnOps(n int) Option {
	return func(o *options) { o.maxTxnOps, o.maxTxnOpsSet = n, true }
}
