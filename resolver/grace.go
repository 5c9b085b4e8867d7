package resolver

import (
	"slices"
	"strings"
	"time"

	"github.com/musterhq/muster/registry"
)

// grace keeps, for one channel, an instance that vanished from the
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
// at now. Without a hold it is serve itself.
func (g *grace) apply(now time.Time, live, serve []*registry.Instance, retired []string) ([]*registry.Instance, graceEvents) {
	var ev graceEvents
	if g.period <= 0 || retired == nil {
		g.live, g.held = live, nil
		return serve, ev
	}
	var held []heldInstance
	keep := func(k heldInstance) {
		if now.Before(k.until) {
			held = append(held, k)
		} else {
			ev.expired = append(ev.expired, k.in.ID)
		}
	}
	// One pass over the previous live list and the holds, both sorted by
	// ID, against the live list.
	i, h := 0, 0
	present := func(id string) bool {
		for i < len(live) && live[i].ID < id {
			i++
		}
		return i < len(live) && live[i].ID == id
	}
	for _, p := range g.live {
		for h < len(g.held) && g.held[h].in.ID < p.ID {
			if present(g.held[h].in.ID) {
				ev.returned = append(ev.returned, g.held[h].in.ID)
			} else {
				keep(g.held[h])
			}
			h++
		}
		if present(p.ID) || p.Draining || slices.Contains(retired, p.ID) {
			continue
		}
		held = append(held, heldInstance{in: p, until: now.Add(g.period)})
		ev.began = append(ev.began, p.ID)
	}
	for ; h < len(g.held); h++ {
		if present(g.held[h].in.ID) {
			ev.returned = append(ev.returned, g.held[h].in.ID)
		} else {
			keep(g.held[h])
		}
	}
	g.live, g.held = live, held
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
