//go:build !linux

package etcdtest

import "syscall"

// sysProcAttr returns nil: only Linux can kill a child when its parent
// dies; elsewhere the child stops when its stdin closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
