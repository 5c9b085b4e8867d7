package watchhub

// SetBeforeRelease makes ss call f when a service's last watcher closed,
// before it takes its lock to decide whether to stop the service.
func SetBeforeRelease[S any](ss *Services[S], f func()) { ss.beforeRelease = f }

// FireStaleLinger calls the stop of key's service as a linger timer that
// fired after a Watch replaced it would: with a pending stop that is no
// longer the service's.
func FireStaleLinger[S any](ss *Services[S], key string) {
	ss.mu.Lock()
	f := ss.services[key]
	ss.mu.Unlock()
	if f != nil {
		ss.stopIdle(f, &lingering{})
	}
}
