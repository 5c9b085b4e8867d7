package console

import (
	"encoding/json"
	"maps"
	"sort"
	"strconv"
	"time"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/legacy"
)

// instanceView is one instance as the service page shows it.
type instanceView struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Source is where a merged view (WithLegacy) found the instance:
	// "muster" or a legacy source's name; empty without WithLegacy.
	Source  string `json:"source,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Region  string `json:"region,omitempty"`
	Version string `json:"version,omitempty"`
	// Color is the instance's metadata color.DefaultInstanceKey, the
	// color balancers route by by default; empty for the base.
	Color    string `json:"color,omitempty"`
	Weight   int    `json:"weight"`
	Draining bool   `json:"draining"`
	// Override is true when an operator's override applies.
	Override bool `json:"override"`
	// Metadata is the instance's, without the source (legacy.SourceKey).
	Metadata     map[string]string `json:"metadata,omitempty"`
	RegisteredAt *time.Time        `json:"registeredAt,omitempty"`
	// LeaseExpires is when the lease holding the instance runs out unless
	// renewed; absent when unknown or when the instance has no lease.
	LeaseExpires *time.Time `json:"leaseExpires,omitempty"`
}

// change is one entry of a service's timeline.
type change struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"` // "added", "changed" or "removed"
	ID   string    `json:"id"`
	What string    `json:"what,omitempty"`
}

// serviceView is the state of one service sent to its page.
type serviceView struct {
	Service    string         `json:"service"`
	Revision   int64          `json:"revision"`
	Generation uint64         `json:"generation"`
	Loaded     bool           `json:"loaded"`
	Stale      bool           `json:"stale"`
	StaleSince *time.Time     `json:"staleSince,omitempty"`
	Error      string         `json:"error,omitempty"`
	Instances  []instanceView `json:"instances"`
	// Canary is the service's canary setting (muster canary); absent for
	// none.
	Canary *registry.Canary `json:"canary,omitempty"`
	// Policy is the service's call policy (muster policy) as stored, with
	// who set it and when if recorded, e.g. {"v":1,"timeout":"800ms",
	// "setBy":"alice (console)","setAt":"2026-12-03T10:20:00Z"}; absent
	// for none.
	Policy json.RawMessage `json:"policy,omitempty"`
	// PolicyFields are the fields Policy sets, in the order of
	// registry.PolicyFields, each as an assignment spells it
	// ([{"name":"timeout","value":"800ms"}]); absent for none.
	PolicyFields []policyValue `json:"policyFields,omitempty"`
	// Changes are the changes since the previous event of the stream,
	// oldest first.
	Changes []change `json:"changes,omitempty"`
	// History is the newest records of the service's journal (muster
	// history), newest first; empty when none.
	History []recordView `json:"history"`
}

// recordView is one traced operator write as the service page shows it.
type recordView struct {
	At       time.Time `json:"at"`
	Who      string    `json:"who"`
	Source   string    `json:"source"`
	Action   string    `json:"action"`
	Instance string    `json:"instance,omitempty"`
	// Before and After say what the values set, as muster history
	// does ("weight 0", "-" for none).
	Before   string `json:"before"`
	After    string `json:"after"`
	Revision int64  `json:"revision"`
}

func newRecordView(r registry.Record) recordView {
	before, after := r.Describe()
	return recordView{At: r.Time, Who: r.Who, Source: r.Source, Action: r.Action, Instance: r.Instance,
		Before: before, After: after, Revision: r.Revision}
}

// policyValue is one field a policy sets.
type policyValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// details are what the console reads from etcd beside a snapshot.
type details struct {
	overrides map[string]bool      // instance IDs with an override
	leases    map[int64][]string   // instance IDs per lease
	expires   map[string]time.Time // lease expiry per instance ID
}

// newServiceView is the state of a service page: snap, det, canary (the
// zero Canary: none) and policy (a zero Policy: none).
func newServiceView(snap registry.Snapshot, det details, canary registry.Canary, policy registry.PolicyInfo) serviceView {
	v := serviceView{
		Service: snap.Service, Revision: snap.Revision, Generation: snap.Generation,
		Loaded: snap.Loaded, Stale: snap.Stale(), Instances: make([]instanceView, 0, len(snap.Instances)),
	}
	if canary != (registry.Canary{}) {
		v.Canary = &canary
	}
	if !policy.Policy.IsZero() {
		if js, err := registry.MarshalPolicyInfo(policy); err == nil {
			v.Policy = js
			for _, f := range registry.PolicyFields() {
				if val := f.Value(policy.Policy); val != "" {
					v.PolicyFields = append(v.PolicyFields, policyValue{Name: f.Name, Value: val})
				}
			}
		}
	}
	if v.Stale {
		t := snap.StaleSince
		v.StaleSince = &t
		if snap.Err != nil {
			v.Error = snap.Err.Error()
		}
	}
	for _, in := range snap.Instances {
		muster := fromMuster(in)
		iv := instanceView{
			ID: in.ID, Addr: in.Addr, Source: legacy.SourceOf(in), Zone: in.Zone, Region: in.Region, Version: in.Version,
			Color:  in.Metadata[color.DefaultInstanceKey],
			Weight: in.EffectiveWeight(), Draining: in.Draining, Override: muster && det.overrides[in.ID],
			Metadata: in.Metadata,
		}
		if iv.Source != "" {
			iv.Metadata = maps.Clone(in.Metadata)
			delete(iv.Metadata, legacy.SourceKey)
		}
		if !in.RegisteredAt.IsZero() {
			t := in.RegisteredAt
			iv.RegisteredAt = &t
		}
		if t, ok := det.expires[in.ID]; ok && muster {
			iv.LeaseExpires = &t
		}
		v.Instances = append(v.Instances, iv)
	}
	return v
}

// diff lists what changed from prev to cur, both sorted by ID as
// snapshots are.
func diff(prev, cur []*registry.Instance, at time.Time) []change {
	var out []change
	i, j := 0, 0
	for i < len(prev) || j < len(cur) {
		switch {
		case j == len(cur) || (i < len(prev) && prev[i].ID < cur[j].ID):
			out = append(out, change{At: at, Kind: "removed", ID: prev[i].ID})
			i++
		case i == len(prev) || cur[j].ID < prev[i].ID:
			out = append(out, change{At: at, Kind: "added", ID: cur[j].ID, What: cur[j].Addr})
			j++
		default:
			if prev[i] != cur[j] && !prev[i].Equal(*cur[j]) {
				out = append(out, change{At: at, Kind: "changed", ID: cur[j].ID, What: describeChange(prev[i], cur[j])})
			}
			i++
			j++
		}
	}
	return out
}

func describeChange(a, b *registry.Instance) string {
	switch {
	case a.Draining != b.Draining && b.Draining:
		return "drained"
	case a.Draining != b.Draining:
		return "undrained"
	case a.EffectiveWeight() != b.EffectiveWeight():
		return "weight " + strconv.Itoa(a.EffectiveWeight()) + " → " + strconv.Itoa(b.EffectiveWeight())
	case a.Version != b.Version:
		return "version " + a.Version + " → " + b.Version
	case a.Metadata[color.DefaultInstanceKey] != b.Metadata[color.DefaultInstanceKey]:
		return "color " + colorName(a) + " → " + colorName(b)
	default:
		return "updated"
	}
}

// colorName is in's color as the timeline names it: "base" for none.
func colorName(in *registry.Instance) string {
	if c := in.Metadata[color.DefaultInstanceKey]; c != "" {
		return c
	}
	return "base"
}

// serviceRow is one service as the services page shows it.
type serviceRow struct {
	Name      string   `json:"name"`
	Instances int      `json:"instances"`
	Draining  int      `json:"draining"`
	Zones     []string `json:"zones"`
	Regions   []string `json:"regions"`
	Versions  []string `json:"versions"`
	// Colors are the colors of its instances (the base not included).
	Colors []string `json:"colors"`
	// Sources are where a merged view (WithLegacy) found its instances;
	// absent without WithLegacy or instances.
	Sources    []string   `json:"sources,omitempty"`
	Loaded     bool       `json:"loaded"`
	Stale      bool       `json:"stale"`
	LastChange *time.Time `json:"lastChange,omitempty"`
}

// fleetView is the state sent to the services page.
type fleetView struct {
	Services []serviceRow `json:"services"`
	Stale    bool         `json:"stale"`
	Error    string       `json:"error,omitempty"`
}

// newServiceRow summarizes snap; lastChange is when the console saw it
// change last (zero: not since it started following it).
func newServiceRow(snap registry.Snapshot, lastChange time.Time) serviceRow {
	r := serviceRow{Name: snap.Service, Instances: len(snap.Instances), Loaded: snap.Loaded, Stale: snap.Stale()}
	zones, regions, versions, colors, sources := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	var latest time.Time
	for _, in := range snap.Instances {
		if in.Draining {
			r.Draining++
		}
		if in.Zone != "" {
			zones[in.Zone] = true
		}
		if in.Region != "" {
			regions[in.Region] = true
		}
		if in.Version != "" {
			versions[in.Version] = true
		}
		if c := in.Metadata[color.DefaultInstanceKey]; c != "" {
			colors[c] = true
		}
		if src := legacy.SourceOf(in); src != "" {
			sources[src] = true
		}
		if in.RegisteredAt.After(latest) {
			latest = in.RegisteredAt
		}
	}
	// Without a change seen, the latest registration is the last change
	// known.
	if !lastChange.IsZero() {
		latest = lastChange
	}
	if !latest.IsZero() {
		r.LastChange = &latest
	}
	r.Zones, r.Regions, r.Versions, r.Colors = sortedKeys(zones), sortedKeys(regions), sortedKeys(versions), sortedKeys(colors)
	if len(sources) > 0 {
		r.Sources = sortedKeys(sources)
	}
	return r
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortRows(rows []serviceRow) {
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
}
