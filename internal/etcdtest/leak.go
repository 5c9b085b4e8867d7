package etcdtest

import "go.uber.org/goleak"

// LeakOptions returns the goleak options that tests using this package pass
// to goleak.VerifyNone or goleak.VerifyTestMain. They ignore only goroutines
// that third-party libraries start once per process and never stop, so
// that they remain after every Cluster is closed.
//
// With etcd v3.7.3 and gRPC v1.85 there are none: once Cluster.Close has
// run, no goroutine of etcd, gRPC, zap or the proxy is left (this package's
// own tests check that with goleak), so the list is empty. Pass it anyway,
// so that a dependency upgrade that needs an exception changes only this
// function.
func LeakOptions() []goleak.Option {
	return []goleak.Option{}
}
