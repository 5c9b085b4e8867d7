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

// LoopbackPlaces is how many places beyond its bound a listener's
// connection pool keeps for the host's own clients (Pool.Loopback): a
// local health check, a local Prometheus, an operator's curl.
const LoopbackPlaces = 8

// Split returns the places of one listener's pools (its connections, the
// handshakes in progress, the Loopback places: every one a file) within
// the listener's file budget: wants as given when their sum is within
// Connections(sum), else each scaled down in proportion, a positive want
// to at least 1.
func Split(wants ...int) []int {
	const most = 1 << 30 // more places than any process has files
	out := make([]int, len(wants))
	sum := 0
	for i, w := range wants {
		out[i] = min(w, most)
		sum += out[i]
	}
	budget := Connections(sum)
	if budget >= sum {
		return out
	}
	for i, w := range out {
		if w > 0 {
			out[i] = max(1, int(int64(w)*int64(budget)/int64(sum)))
		}
	}
	return out
}
