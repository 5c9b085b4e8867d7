// Package gozero registers a go-zero zrpc server through a Muster
// Registrar while it keeps zrpc (Register), and holds the tests that run
// go-zero's own service discovery (core/discov) against Muster on the same
// etcd: a Muster channel calling servers published by go-zero, and
// go-zero's subscriber finding a Muster server that dual-writes go-zero's
// layout. It is its own Go module so that the main module's users never
// download go-zero. The layout adapters need no go-zero code and live in
// the main module (registry/legacy).
//
// A zrpc client balances with muster_p2c, zone awareness included, when
// it names it: zrpc.RpcClientConf{Target: "muster:///user?zone=eu-1a",
// BalancerName: "muster_p2c"} with Muster's resolver builder as a dial
// option (docs/MIGRATION.md).
//
// go-zero keeps process-wide etcd clients and goroutines that nothing can
// close, so this module's leak check ignores those goroutines by name.
package gozero
