package zookeeper

// WithoutNodeWatches leaves the audit as a Registrar's only repair.
func WithoutNodeWatches() Option { return func(o *options) { o.noNodeWatches = true } }

// UpTo calls do(i) for every i in [0, n) from at most concurrent
// goroutines (the Registrar's and the Discovery's way of having requests
// in flight together).
func UpTo(n, concurrent int, do func(i int)) { upTo(n, concurrent, do) }
