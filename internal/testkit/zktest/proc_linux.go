package zktest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel kill a server when the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitState polls /proc until process pid is stopped (or running again):
// a signal takes effect asynchronously, and the kernel announces nothing.
func waitState(pid int, stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
		}
		if st := s[i+2]; (st == 'T' || st == 't') == stopped {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("process %d in state %c after %v", pid, st, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
