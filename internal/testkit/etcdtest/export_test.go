package etcdtest

// ProxyAccepted returns how many connections m's proxy has accepted.
func ProxyAccepted(m *Member) int64 { return m.proxy.accepted.Load() }
