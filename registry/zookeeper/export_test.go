package zookeeper

// WithoutNodeWatches leaves the audit as a Registrar's only repair.
func WithoutNodeWatches() Option { return func(o *options) { o.noNodeWatches = true } }
