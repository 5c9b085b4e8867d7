package zookeeper

import "github.com/go-zookeeper/zk"

// watchKey names one watch a service sets: on the service's node (its data,
// or its existence while it is missing), on the service node's children,
// or on an instance node's data.
type watchKey struct {
	children bool
	id       string // "" for the service's node
}

// armed is the set of a service's watches that are set on the server and
// have not fired. The client library keeps one channel per watching
// request until the watch fires, and sets every one again after a
// reconnection, so a read asks for a watch only when none is armed.
type armed map[watchKey]bool

// arm marks k armed and reports whether it was not: the caller must then
// set the watch (and disarm k if that fails).
func (a armed) arm(k watchKey) bool {
	if a[k] {
		return false
	}
	a[k] = true
	return true
}

// fired forgets the watches that an event of type t on node id ("" for
// the service's node) fires.
func (a armed) fired(id string, t zk.EventType) {
	switch {
	case id != "":
		delete(a, watchKey{id: id})
	case t == zk.EventNodeChildrenChanged:
		delete(a, watchKey{children: true})
	case t == zk.EventNodeDeleted:
		delete(a, watchKey{})
		delete(a, watchKey{children: true})
	default: // created, or its data changed
		delete(a, watchKey{})
	}
}
