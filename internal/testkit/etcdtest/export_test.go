package etcdtest

// ProxyAccepted returns how many connections m's proxy has accepted.
func ProxyAccepted(m *Member) int64 { return m.proxy.accepted.Load() }

// PID returns the process ID of a running process member, or 0.
func PID(m *Member) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.cmd.Process.Pid
}
