package console

import (
	"encoding/json"
	"maps"
	"sort"
	"strconv"
	"strings"
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
	Source string `json:"source,omitempty"`
	// Cluster is the instance's cluster in a console over several
	// (NewClusters); empty otherwise.
	Cluster string `json:"cluster,omitempty"`
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
	// Metadata is the instance's, without the source (legacy.SourceKey)
	// and the cluster (registry.ClusterKey).
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
	// Cluster is the instance's cluster in a console over several.
	Cluster string `json:"cluster,omitempty"`
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
	// history), newest first; empty when none. Over several clusters,
	// the newest of every cluster's journal.
	History []recordView `json:"history"`
	// NoHistory is true when no registry the page reads keeps a journal
	// (registry.HistoryReader: ZooKeeper keeps none); the page then says
	// so instead of listing writes.
	NoHistory bool `json:"noHistory,omitempty"`
	// NoLeases is true when no registry the page reads holds instances by
	// leases (etcd.LeaseReader); the page then shows no lease times.
	NoLeases bool `json:"noLeases,omitempty"`
	// Clusters is each cluster's part, by name, in a console over
	// several (NewClusters), where Canary, Policy and PolicyFields are
	// per cluster, there; absent otherwise.
	Clusters []clusterPartView `json:"clusters,omitempty"`
}

// clusterPartView is one cluster's part of a service page.
type clusterPartView struct {
	Name       string     `json:"name"`
	Region     string     `json:"region,omitempty"`
	Loaded     bool       `json:"loaded"`
	Stale      bool       `json:"stale"`
	StaleSince *time.Time `json:"staleSince,omitempty"`
	Error      string     `json:"error,omitempty"`
	Instances  int        `json:"instances"`
	// Canary, Policy and PolicyFields are the cluster's, as
	// serviceView's are for one cluster.
	Canary       *registry.Canary `json:"canary,omitempty"`
	Policy       json.RawMessage  `json:"policy,omitempty"`
	PolicyFields []policyValue    `json:"policyFields,omitempty"`
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
	// Cluster is the cluster whose journal holds the record, in a console
	// over several.
	Cluster string `json:"cluster,omitempty"`
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

// details are what the console reads from a cluster beside a snapshot.
type details struct {
	overrides map[string]bool      // instance IDs with an override
	expires   map[string]time.Time // lease expiry per instance ID
}

// newServiceView is the state of a service page: snap, with what the page
// knows of each cluster (parts, by name: "" for a console's only one).
func (s *Server) newServiceView(snap registry.Snapshot, parts map[string]*partState) serviceView {
	v := serviceView{
		Service: snap.Service, Revision: snap.Revision, Generation: snap.Generation,
		Loaded: snap.Loaded, Stale: snap.Stale(), Instances: make([]instanceView, 0, len(snap.Instances)),
		NoHistory: true, NoLeases: !s.leased(),
	}
	for _, p := range s.parts {
		v.NoHistory = v.NoHistory && p.journal == nil
	}
	if v.Stale {
		t := snap.StaleSince
		v.StaleSince = &t
		if snap.Err != nil {
			v.Error = snap.Err.Error()
		}
	}
	if !s.several() {
		ps := parts[""]
		v.Canary, v.Policy, v.PolicyFields = settingsView(ps.canary, ps.policy)
		v.History = ps.history
	} else {
		v.Clusters = s.clusterPartViews(snap, parts)
		var lists [][]recordView
		for _, p := range s.parts {
			lists = append(lists, parts[p.name].history)
		}
		v.History = newestRecords(lists, maxHistoryShown)
	}
	for _, in := range snap.Instances {
		muster := fromMuster(in)
		cluster := registry.ClusterOf(in)
		det := parts[cluster].det
		iv := instanceView{
			ID: in.ID, Addr: in.Addr, Source: legacy.SourceOf(in), Cluster: cluster, Zone: in.Zone, Region: in.Region, Version: in.Version,
			Color:  in.Metadata[color.DefaultInstanceKey],
			Weight: in.EffectiveWeight(), Draining: in.Draining, Override: muster && det.overrides[in.ID],
			Metadata: in.Metadata,
		}
		if iv.Source != "" || iv.Cluster != "" {
			iv.Metadata = maps.Clone(in.Metadata)
			delete(iv.Metadata, legacy.SourceKey)
			delete(iv.Metadata, registry.ClusterKey)
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

// clusterPartViews are the clusters' parts of snap, with their settings
// from parts.
func (s *Server) clusterPartViews(snap registry.Snapshot, parts map[string]*partState) []clusterPartView {
	out := make([]clusterPartView, 0, len(s.parts))
	for _, p := range s.parts {
		cv := clusterPartView{Name: p.name, Region: p.region}
		for _, c := range snap.Clusters {
			if c.Cluster != p.name {
				continue
			}
			cv.Loaded, cv.Stale, cv.Instances = c.Loaded, c.Stale(), len(c.Instances)
			if cv.Stale {
				t := c.StaleSince
				cv.StaleSince = &t
				if c.Err != nil {
					cv.Error = c.Err.Error()
				}
			}
		}
		ps := parts[p.name]
		cv.Canary, cv.Policy, cv.PolicyFields = settingsView(ps.canary, ps.policy)
		out = append(out, cv)
	}
	return out
}

// settingsView is how a page shows a canary setting and a policy: nil
// for none.
func settingsView(canary registry.Canary, policy registry.PolicyInfo) (*registry.Canary, json.RawMessage, []policyValue) {
	var c *registry.Canary
	if canary != (registry.Canary{}) {
		c = &canary
	}
	if policy.Policy.IsZero() {
		return c, nil, nil
	}
	js, err := registry.MarshalPolicyInfo(policy)
	if err != nil {
		return c, nil, nil
	}
	var fields []policyValue
	for _, f := range registry.PolicyFields() {
		if val := f.Value(policy.Policy); val != "" {
			fields = append(fields, policyValue{Name: f.Name, Value: val})
		}
	}
	return c, js, fields
}

// newestRecords merges lists of records, each newest first, into one
// newest first (by time, then revision), of at most n records.
func newestRecords(lists [][]recordView, n int) []recordView {
	var out []recordView
	for _, l := range lists {
		out = append(out, l...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.After(out[j].At)
		}
		return out[i].Revision > out[j].Revision
	})
	if len(out) > n {
		out = out[:n]
	}
	if out == nil {
		out = []recordView{}
	}
	return out
}

// diff lists what changed from prev to cur, both sorted by ID (then
// cluster) as snapshots are.
func diff(prev, cur []*registry.Instance, at time.Time) []change {
	var out []change
	i, j := 0, 0
	for i < len(prev) || j < len(cur) {
		var order int
		switch {
		case j == len(cur):
			order = -1
		case i == len(prev):
			order = 1
		default:
			order = compareInstances(prev[i], cur[j])
		}
		switch {
		case order < 0:
			out = append(out, change{At: at, Kind: "removed", ID: prev[i].ID, Cluster: registry.ClusterOf(prev[i])})
			i++
		case order > 0:
			out = append(out, change{At: at, Kind: "added", ID: cur[j].ID, What: cur[j].Addr, Cluster: registry.ClusterOf(cur[j])})
			j++
		default:
			if prev[i] != cur[j] && !prev[i].Equal(*cur[j]) {
				out = append(out, change{At: at, Kind: "changed", ID: cur[j].ID, What: describeChange(prev[i], cur[j]), Cluster: registry.ClusterOf(cur[j])})
			}
			i++
			j++
		}
	}
	return out
}

// compareInstances orders instances as a snapshot does: by ID, then by
// cluster.
func compareInstances(a, b *registry.Instance) int {
	if c := strings.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return strings.Compare(registry.ClusterOf(a), registry.ClusterOf(b))
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
	Sources []string `json:"sources,omitempty"`
	// Clusters are its instances per cluster, every cluster named, in a
	// console over several (NewClusters); absent otherwise.
	Clusters   map[string]int `json:"clusters,omitempty"`
	Loaded     bool           `json:"loaded"`
	Stale      bool           `json:"stale"`
	LastChange *time.Time     `json:"lastChange,omitempty"`
}

// fleetView is the state sent to the services page.
type fleetView struct {
	Services []serviceRow `json:"services"`
	Stale    bool         `json:"stale"`
	Error    string       `json:"error,omitempty"`
	// Clusters is each cluster's health, by name, in a console over
	// several (NewClusters); absent otherwise.
	Clusters []clusterHealth `json:"clusters,omitempty"`
}

// The states of a cluster on the services page.
const (
	// clusterLoading: its first listing has not ended.
	clusterLoading = "loading"
	// clusterFresh: it answers, and every service's part is followed.
	clusterFresh = "fresh"
	// clusterStale: it answered once, and now a listing fails or a
	// service's part is stale: its instances are shown as last read.
	clusterStale = "stale"
	// clusterUnreachable: it never answered.
	clusterUnreachable = "unreachable"
)

// clusterHealth is one cluster's state on the services page.
type clusterHealth struct {
	Name   string `json:"name"`
	Region string `json:"region,omitempty"`
	// State is clusterLoading, clusterFresh, clusterStale or
	// clusterUnreachable.
	State string `json:"state"`
	// StaleSince is when it stopped answering, if it is stale.
	StaleSince *time.Time `json:"staleSince,omitempty"`
	// Error is why it is stale or unreachable.
	Error string `json:"error,omitempty"`
	// Services is the number of services it listed last.
	Services int `json:"services"`
}

// newClusterHealth is the state of cluster p from its listings (l) and
// its parts of the snapshots of the services followed.
func newClusterHealth(p *part, l partList, snaps []registry.Snapshot) clusterHealth {
	h := clusterHealth{Name: p.name, Region: p.region, Services: len(l.names)}
	var since time.Time
	var why error
	loaded := false
	for _, snap := range snaps {
		for _, c := range snap.Clusters {
			if c.Cluster != p.name {
				continue
			}
			loaded = loaded || c.Loaded
			if c.Stale() && (since.IsZero() || c.StaleSince.Before(since)) {
				since, why = c.StaleSince, c.Err
			}
		}
	}
	if l.err != nil {
		if since.IsZero() || l.failingSince.Before(since) {
			since = l.failingSince
		}
		why = l.err
	}
	switch {
	case !l.done && !loaded:
		h.State = clusterLoading
	case !l.answered && !loaded && l.err != nil:
		h.State = clusterUnreachable
	case !since.IsZero():
		h.State = clusterStale
		h.StaleSince = &since
	default:
		h.State = clusterFresh
	}
	if why != nil && h.State != clusterFresh {
		h.Error = why.Error()
	}
	return h
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
