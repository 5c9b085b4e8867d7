package legacy

import (
	"time"

	"github.com/musterhq/muster/registry"
)

// settleTime bounds how long a merge leaves out an address while the
// parts' revisions say that a change is half seen (settler). A dual-write
// transaction's events reach the parts' watches, which share one etcd
// client, within milliseconds; a legacy source on another etcd cluster,
// whose revisions do not compare, waits at most this long.
const settleTime = time.Second

// settler keeps a merge from showing the half-seen states of a dual write
// (etcd.WithMirror), where one transaction writes or deletes an
// instance's key in Muster's layout and its copy in a legacy one, and the
// parts' watches see the two at different moments:
//
//   - an address that appears in a legacy part at a revision Muster's
//     part has not reached is held out until Muster's part reaches it
//     (the registration's Muster key then wins), or the address shows up
//     there;
//   - an address that left Muster's part at a revision a legacy part has
//     not reached is held out of that part until it reaches it (the copy
//     is deleted in the same transaction).
//
// Either hold ends after settleTime whatever the revisions say, or when
// the address leaves the legacy part. Without it, an operator following
// the merge reads a server that registers as "+ go-zero, - go-zero,
// + muster", and one that deregisters as coming back undrained from the
// legacy copy before it goes. A settler is used by one goroutine.
type settler struct {
	inPrimary map[string]bool // the addresses of Muster's part at the last merge
	served    map[string]bool // the addresses the last merge served
	holds     map[string]hold
}

// hold is an address left out of the legacy parts until the part awaited
// reaches a revision, or until a time.
type hold struct {
	part  int
	rev   int64
	until time.Time
}

// hidden returns the addresses to leave out of the legacy parts (parts[1:])
// in the merge of parts at now, and when the earliest hold ends (zero for
// none): the merge is to be made again then.
func (s *settler) hidden(parts []registry.Snapshot, now time.Time) (map[string]bool, time.Time) {
	primary := make(map[string]bool, len(parts[0].Instances))
	for _, in := range parts[0].Instances {
		primary[in.Addr] = true
	}
	inPart := func(i int, addr string) bool {
		for _, in := range parts[i].Instances {
			if in.Addr == addr {
				return true
			}
		}
		return false
	}
	out := map[string]bool{}
	var next time.Time
	keep := func(addr string, h hold) {
		out[addr] = true
		if next.IsZero() || h.until.Before(next) {
			next = h.until
		}
	}
	for addr, h := range s.holds {
		if primary[addr] || parts[h.part].Revision >= h.rev || !now.Before(h.until) || !s.inLegacy(parts, addr, inPart) {
			delete(s.holds, addr)
			continue
		}
		keep(addr, h)
	}
	r0 := parts[0].Revision
	if parts[0].Loaded {
		for i := 1; i < len(parts); i++ {
			p := parts[i]
			if !p.Loaded {
				continue
			}
			for _, in := range p.Instances {
				addr := in.Addr
				if primary[addr] || out[addr] {
					continue
				}
				var h hold
				switch {
				case s.inPrimary[addr] && p.Revision < r0:
					h = hold{part: i, rev: r0} // left Muster's part; the copy's deletion not seen yet
				case !s.served[addr] && p.Revision > r0:
					h = hold{part: 0, rev: p.Revision} // a copy whose Muster key is not seen yet
				default:
					continue
				}
				h.until = now.Add(settleTime)
				if s.holds == nil {
					s.holds = map[string]hold{}
				}
				s.holds[addr] = h
				keep(addr, h)
			}
		}
	}
	s.inPrimary = primary
	return out, next
}

// inLegacy reports whether a legacy part lists addr.
func (s *settler) inLegacy(parts []registry.Snapshot, addr string, inPart func(int, string) bool) bool {
	for i := 1; i < len(parts); i++ {
		if inPart(i, addr) {
			return true
		}
	}
	return false
}

// merged records the addresses a merge served.
func (s *settler) merged(snap registry.Snapshot) {
	s.served = make(map[string]bool, len(snap.Instances))
	for _, in := range snap.Instances {
		s.served[in.Addr] = true
	}
}
