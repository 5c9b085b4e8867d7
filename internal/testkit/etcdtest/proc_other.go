//go:build !linux

package etcdtest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: only Linux can kill a child when its parent
// dies; elsewhere the child stops when its stdin closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitState returns at once: only Linux tells a process's state through
// /proc; elsewhere Freeze and Thaw return once the signal is sent.
func waitState(pid int, stopped bool, timeout time.Duration) error { return nil }
