//go:build unix

package admission

import "syscall"

// fileLimit returns the process's soft limit on open files (which the Go
// runtime raises to the hard limit at start), or 0 if it cannot be read.
func fileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
