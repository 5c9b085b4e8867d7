//go:build !linux

package proctest

import (
	"syscall"
	"time"
)

// SysProcAttr returns nil: only Linux can kill a child when its parent
// dies. Elsewhere a child outlives a test process that is killed: the
// test's cleanups end it on a normal exit, and a child that must die with
// its parent has to notice by itself (etcdtest's children exit when their
// stdin closes; a ZooKeeper server never reads its stdin, so zktest's
// servers are left running).
func SysProcAttr() *syscall.SysProcAttr { return nil }

// WaitState returns at once: only Linux tells a process's state through
// /proc; elsewhere Freeze and Thaw return once the signal is sent.
func WaitState(pid int, stopped bool, timeout time.Duration) error { return nil }
