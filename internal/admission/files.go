package admission

// What a listener may hold is bounded by the process's file descriptors as
// well as by its own default: an embedded etcd shares the process, and it
// exits when it cannot open a file (its WAL, its snapshots). So every
// listener takes at most a quarter of the limit, and the process keeps at
// least half of it with two listeners full (muster serve's HTTP and xDS).
const listenerShareOfFiles = 4

// Connections returns the most connections a listener should hold:
// want, or a quarter of the process's file-descriptor limit if that is
// less (at least 1). Where the limit cannot be read, it returns want.
func Connections(want int) int {
	limit := fileLimit()
	if limit <= 0 {
		return want
	}
	return max(1, min(want, limit/listenerShareOfFiles))
}
