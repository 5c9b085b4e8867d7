package registrytest

import (
	"fmt"

	"github.com/musterhq/muster/registry"
)

// ListSequence plays ops as a Discovery's lists of one service of up to 12
// instances, for fuzz tests of what is built from successive lists: each op
// adds or removes an instance (op%4 == 0), changes one or reads it again
// equal as a new pointer (1), publishes the current list, sorted by ID (2),
// or publishes an older list again, the same slice, as protection serves
// it (3). each is called with every published list.
func ListSequence(ops []byte, each func(list []*registry.Instance)) {
	const slots = 12
	var cur [slots]*registry.Instance
	var published [][]*registry.Instance
	for n, op := range ops {
		k := int(op/4) % slots
		switch op % 4 {
		case 0:
			if cur[k] != nil {
				cur[k] = nil
			} else {
				cur[k] = sequenceInstance(k, n)
			}
			continue
		case 1:
			if cur[k] != nil {
				cur[k] = sequenceInstance(k, n)
			}
			continue
		}
		var list []*registry.Instance
		if op%4 == 2 || len(published) == 0 {
			for _, in := range cur {
				if in != nil {
					list = append(list, in)
				}
			}
			published = append(published, list)
		} else {
			list = published[k%len(published)]
		}
		each(list)
	}
}

// sequenceInstance makes instance k at step n: its version, zone, weight
// and metadata vary with n, and are sometimes those of the step before.
func sequenceInstance(k, n int) *registry.Instance {
	v := n / 2
	return &registry.Instance{
		Name: "svc", ID: fmt.Sprintf("%02d", k), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+k),
		Version: fmt.Sprintf("v%d", 1+v%2), Zone: fmt.Sprintf("z%d", 1+(v/2)%2),
		Weight: 100 + v%3, Metadata: map[string]string{"color": []string{"blue", "green"}[(v/3)%2]},
	}
}

// Numbered returns n+1 instances of service svc sorted by ID, for
// benchmarks of lists of n that change by one instance: each with its own
// address, weight 100 and version v0 or v1 in turn.
func Numbered(n int) []*registry.Instance {
	all := make([]*registry.Instance, n+1)
	for i := range all {
		all[i] = &registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i%40000),
			Weight: 100, Version: fmt.Sprintf("v%d", i%2)}
	}
	return all
}
