//go:build !linux

package proctest

import (
	"syscall"
	"time"
)

// SysProcAttr returns nil: only Linux can kill a child when its parent
// dies; elsewhere the child stops when its stdin closes.
func SysProcAttr() *syscall.SysProcAttr { return nil }

// WaitState returns at once: only Linux tells a process's state through
// /proc; elsewhere Freeze and Thaw return once the signal is sent.
func WaitState(pid int, stopped bool, timeout time.Duration) error { return nil }
