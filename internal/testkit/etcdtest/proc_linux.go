package etcdtest

import "syscall"

// sysProcAttr makes the kernel kill a child process when its parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
