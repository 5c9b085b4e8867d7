// Package gozero holds the tests that run go-zero's own service discovery
// (core/discov) against Muster on the same etcd: a Muster channel calling
// servers published by go-zero, and go-zero's subscriber finding a Muster
// server that dual-writes go-zero's layout. It is its own Go module so that
// the main module's users never download go-zero. The adapters themselves
// need no go-zero code and live in the main module (registry/legacy).
//
// go-zero keeps process-wide etcd clients and goroutines that nothing can
// close, so this module's leak check ignores those goroutines by name.
package gozero
