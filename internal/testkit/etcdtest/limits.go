package etcdtest

// WithMaxTxnOps sets the most operations the members accept in one
// transaction (etcd's --max-txn-ops, default 128), so that a test can make
// etcd refuse a transaction as too large ("too many operations in txn
// request") with few keys. Start fails the test for n < 1.
func WithMaxTxnOps(n int) Option {
	return func(o *options) { o.maxTxnOps, o.maxTxnOpsSet = n, true }
}

// WithMaxRequestBytes sets the largest request the members accept (etcd's
// --max-request-bytes, default 1.5 MiB), so that a test can run etcd as
// muster serve configures it. Start fails the test for n < 0; 0 keeps
// etcd's default.
func WithMaxRequestBytes(n int) Option {
	return func(o *options) { o.maxReqSize = n }
}
