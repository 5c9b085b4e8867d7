package resolver

import (
	"sync"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

// endpoints are a chosen list's form for gRPC (its served.Chosen's Built):
// made once per target and list by the pipeline (buildEndpoints), and
// handed to every channel serving that list, so that a change to a service
// of n instances followed by c channels costs one list's endpoints, not c,
// and the channels keep no arrays of their own. The arrays are never
// written once built, so sharing them among channels (and keeping them in
// gRPC and balancers) is safe.
type endpoints struct {
	eps   []grpcresolver.Endpoint
	addrs []grpcresolver.Address

	mu    sync.Mutex
	next  stateArrays // the arrays of the list after this one (prepare)
	taken bool        // next was handed to that list
}

// buildEndpoints is the pipeline's Build: the endpoints and addresses of
// list, reusing those of prev's unchanged instances, in the arrays
// prepared after prev was pushed when they are large enough.
func buildEndpoints(list []*registry.Instance, prev *served.Chosen) any {
	var prevList []*registry.Instance
	var prevEPs []grpcresolver.Endpoint
	var spare stateArrays
	if prev != nil {
		if pe, ok := prev.Built.(*endpoints); ok {
			prevList, prevEPs = prev.Instances, pe.eps
			spare = pe.takeNext()
		}
	}
	e := &endpoints{}
	e.eps, e.addrs = spare.take(len(list))
	reuseEndpoints(e.eps, e.addrs, list, prevList, prevEPs)
	return e
}

// takeNext returns the arrays prepared for the next list, once.
func (e *endpoints) takeNext() stateArrays {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.taken = true
	next := e.next
	e.next = stateArrays{}
	return next
}

// prepare allocates the arrays of the list after this one, after it was
// handed to gRPC, unless they are ready or taken: allocating and zeroing
// them (and, while the garbage collector runs, paying its assist for them)
// is then off the path from a change to the channel.
func (e *endpoints) prepare() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.taken || e.next.eps != nil {
		return
	}
	e.next.prepare(len(e.eps))
}

// stateArrays holds the arrays of the next state. They are fresh arrays,
// never handed to gRPC before, since gRPC and balancers may keep the
// previous state.
type stateArrays struct {
	eps   []grpcresolver.Endpoint
	addrs []grpcresolver.Address
}

// take returns arrays of n endpoints and addresses: the prepared ones if
// they are large enough, else new ones. They are not handed out again.
func (a *stateArrays) take(n int) ([]grpcresolver.Endpoint, []grpcresolver.Address) {
	eps, addrs := a.eps, a.addrs
	a.eps, a.addrs = nil, nil
	if cap(eps) < n || cap(addrs) < n {
		return make([]grpcresolver.Endpoint, n), make([]grpcresolver.Address, n)
	}
	// Capped at n, so that an append by the receiver copies.
	return eps[:n:n], addrs[:n:n]
}

// prepare allocates the arrays of the next state for about n instances,
// with room for some growth.
func (a *stateArrays) prepare(n int) {
	size := n + n/8 + 4
	a.eps = make([]grpcresolver.Endpoint, size)
	a.addrs = make([]grpcresolver.Address, size)
}

// reuseEndpoints fills eps and addrs (of len(list)) with the endpoints of
// list and their addresses (for balancers that read only addresses, such
// as balancer/base), reusing those built for prev (whose endpoints are
// prevEPs) for unchanged instances. Both lists are sorted by ID, so one
// merge pass finds them, and an unchanged instance is the same pointer in
// both: an update touching a few instances of a large service builds only
// those, and the rest of the pass is the copy gRPC requires.
func reuseEndpoints(eps []grpcresolver.Endpoint, addrs []grpcresolver.Address, list, prev []*registry.Instance, prevEPs []grpcresolver.Endpoint) {
	j := 0
	for i, in := range list {
		switch {
		case j < len(prev) && prev[j] == in:
			eps[i] = prevEPs[j] // the common case: no string compared
			j++
		default:
			for j < len(prev) && prev[j].ID < in.ID {
				j++
			}
			if j < len(prev) && prev[j].ID == in.ID && (prev[j] == in || prev[j].Equal(*in)) {
				// Back in step after an instance left or joined: the
				// ones after it take the common case again.
				eps[i] = prevEPs[j]
				j++
			} else {
				eps[i] = endpointOf(in)
			}
		}
		addrs[i] = eps[i].Addresses[0]
	}
}
