package watchhub

// SetBeforeRelease makes ss call f when a service's last watcher closed,
// before it takes its lock to decide whether to stop the service.
func SetBeforeRelease[S any](ss *Services[S], f func()) { ss.beforeRelease = f }
