package proctest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// SysProcAttr makes the kernel kill a child process when its parent dies.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// WaitState waits until the process pid is stopped (stopped true) or not
// (false), as /proc/<pid>/stat reports it, for at most timeout: a signal
// is delivered asynchronously, and a process keeps answering until the
// kernel has stopped all of its threads.
func WaitState(pid int, stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// The state follows the command name, which is in parentheses.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
		}
		state := s[i+2]
		if (state == 'T' || state == 't') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d in state %c after %v", pid, state, timeout)
		}
		time.Sleep(time.Millisecond) // polling the kernel's view; no event to await
	}
}
