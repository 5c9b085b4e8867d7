package served

import (
	"slices"
	"strings"
	"time"

	"github.com/musterhq/muster/registry"
)

// grace keeps, for one follower, an instance that vanished from the
// registry while it served: etcd revokes live leases after a paused leader
// resumes (docs/RELIABILITY.md), and the instance's registrar writes it
// again under a new lease within milliseconds. Believing such a deletion
// would make the channel drop the instance's connection and open a new one
// moments later; so an instance that leaves the registry's list without
// having been Draining, and without the registry marking its departure as
// deliberate (registry.Snapshot's Retired), is still served for the grace
// period. Its return (any instance with its ID) ends the hold at once;
// otherwise it leaves when the period ends.
//
// A held instance that really crashed costs nothing: its connection has
// failed, and balancers pick only ready endpoints. One that was drained
// (by its health, an operator's override, or its registrar's Deregister,
// which drains first) leaves at once.
//
// A backend that does not record deliberate departures (Retired nil) gets
// no grace: every deletion is final, as before.
//
// The grace acts beside empty-list protection, not through it: protection
// judges the same live lists with or without it, and the held instances
// are added to the list protection serves. A hold begins only when an
// instance leaves the live list, so a list protection releases when it
// lifts (a window after the losses) is served as it is.
//
// grace is pure: each call is given the time, and its owner asks next when
// a hold ends, to decide again then with no new snapshot.
type grace struct {
	period time.Duration // 0: disabled

	live []*registry.Instance // the live list of the last apply, sorted by ID
	held []heldInstance       // instances that left it, sorted by ID
}

// heldInstance is an instance served after it left the registry, until.
type heldInstance struct {
	in    *registry.Instance
	until time.Time
}

// graceEvents is what one apply changed: the IDs of the instances whose
// hold began, ended by their return, or ran out. Nil slices when none.
type graceEvents struct {
	began, returned, expired []string
}

// apply returns the list to serve instead of serve, the list protection
// serves for live (both sorted by ID), given the IDs the registry retired,
// at now. Without a hold it is serve itself. departures returns the
// instances of one live list missing from the next (departed, or a memo of
// it shared by the target's followers, which see the same lists): an
// unchanged or grown list costs no pass over it here.
func (g *grace) apply(now time.Time, live, serve []*registry.Instance, retired []string,
	departures func(prev, live []*registry.Instance) []*registry.Instance) ([]*registry.Instance, graceEvents) {
	var ev graceEvents
	if g.period <= 0 || retired == nil {
		g.live, g.held = live, nil
		return serve, ev
	}
	var gone []*registry.Instance
	if !sameList(g.live, live) {
		gone = departures(g.live, live)
	}
	g.live = live
	if len(gone) == 0 && len(g.held) == 0 {
		return serve, ev
	}
	var held []heldInstance
	for _, k := range g.held {
		switch {
		case contains(live, k.in.ID):
			ev.returned = append(ev.returned, k.in.ID)
		case now.Before(k.until):
			held = append(held, k)
		default:
			ev.expired = append(ev.expired, k.in.ID)
		}
	}
	for _, p := range gone {
		if !p.Draining && !slices.Contains(retired, p.ID) {
			held = append(held, heldInstance{in: p, until: now.Add(g.period)})
			ev.began = append(ev.began, p.ID)
		}
	}
	slices.SortFunc(held, func(a, b heldInstance) int { return strings.Compare(a.in.ID, b.in.ID) })
	g.held = held
	if len(held) == 0 {
		return serve, ev
	}
	out := make([]*registry.Instance, 0, len(serve)+len(held))
	j := 0
	for _, k := range held {
		for j < len(serve) && serve[j].ID < k.in.ID {
			out = append(out, serve[j])
			j++
		}
		if j < len(serve) && serve[j].ID == k.in.ID {
			continue // protection serves it anyway
		}
		out = append(out, k.in)
	}
	out = append(out, serve[j:]...)
	if len(out) == len(serve) {
		return serve, ev // every held instance is served by protection
	}
	return out, ev
}

// departed returns the instances of prev whose ID is not in live, both
// sorted by ID: one merge pass.
func departed(prev, live []*registry.Instance) []*registry.Instance {
	var gone []*registry.Instance
	i := 0
	for _, p := range prev {
		if i < len(live) && live[i] == p {
			i++ // the common case: no string compared
			continue
		}
		for i < len(live) && live[i].ID < p.ID {
			i++
		}
		if i < len(live) && live[i].ID == p.ID {
			i++
			continue
		}
		gone = append(gone, p)
	}
	return gone
}

// contains reports whether list, sorted by ID, has an instance with id.
func contains(list []*registry.Instance, id string) bool {
	_, ok := slices.BinarySearchFunc(list, id, func(in *registry.Instance, id string) int { return strings.Compare(in.ID, id) })
	return ok
}

// next returns when the earliest hold ends; ok is false without a hold.
func (g *grace) next() (at time.Time, ok bool) {
	for _, k := range g.held {
		if !ok || k.until.Before(at) {
			at, ok = k.until, true
		}
	}
	return at, ok
}

// joinIDs joins IDs for a log line.
func joinIDs(list []string) string { return strings.Join(list, ",") }
