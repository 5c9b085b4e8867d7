package xds

import (
	"sort"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Bounds of what a Server keeps of its clients: what a client sends is
// not trusted to be small.
const (
	// maxTrackedStreams is how many open streams Clients reports; the
	// streams opened while that many are open are served but not listed.
	maxTrackedStreams = 10000
	// maxTypesPerStream is how many resource types are kept per stream.
	maxTypesPerStream = 16
	// maxNamesPerType is how many subscribed resource names are kept per
	// type of a stream.
	maxNamesPerType = 1000
	// maxTextBytes bounds a node ID, a zone, a type URL and a NACK's
	// error detail.
	maxTextBytes = 1024
)

// ClientStatus is what a Server knows of one open ADS stream (see
// Server.Clients). Node, Zone, the type URLs, the resource names and the
// error details are as the client sent them: untrusted text.
type ClientStatus struct {
	// Stream numbers the stream among those of its kind (state of the
	// world or delta).
	Stream int64
	// Delta is true for an incremental (delta) ADS stream.
	Delta bool
	// Node is the client's node ID, Region and Zone its locality's; all
	// are empty until its first request.
	Node, Region, Zone string
	// UserAgent is the client's xDS implementation as its node names it
	// (user_agent_name and user_agent_version, e.g. "gRPC Go 1.85.0");
	// empty until its first request.
	UserAgent string
	// Since is when the stream opened.
	Since time.Time
	// Services are the resource names the client subscribes to, of every
	// type, sorted (each resource is named after its service).
	Services []string
	// Types has an entry per resource type the client asked for, sorted
	// by type URL.
	Types []TypeStatus
}

// TypeStatus is one resource type of a ClientStatus.
type TypeStatus struct {
	// TypeURL is the resource type.
	TypeURL string
	// Resources are the names subscribed to, sorted (none: every
	// resource, for the types where that means a wildcard).
	Resources []string
	// Truncated is true when more names were subscribed to than are kept.
	Truncated bool
	// Sent is the version of the last response sent, at SentAt; empty if
	// none was.
	Sent   string
	SentAt time.Time
	// Acked is the last version the client accepted, at AckedAt; empty
	// if none was.
	Acked   string
	AckedAt time.Time
	// NACK is the client's last rejection, nil if it never rejected a
	// response of this type.
	NACK *Rejection
}

// Rejection is a response a client rejected (a NACK).
type Rejection struct {
	// Version is the version rejected; empty if the response it names
	// is not the last one sent.
	Version string
	// Error is the client's error detail.
	Error string
	// At is when the NACK came.
	At time.Time
}

// Clients returns the open ADS streams, oldest first: a copy, which the
// caller may keep. At most 10,000 streams are listed. It does not block on
// I/O.
func (s *Server) Clients() []ClientStatus { return s.stats.table.list() }

// streamKey names a stream: state-of-the-world and delta streams are
// numbered apart.
type streamKey struct {
	delta bool
	id    int64
}

// clientTable is the status of each open stream, written by
// go-control-plane's callbacks.
type clientTable struct {
	mu      sync.Mutex
	streams map[streamKey]*clientState
}

// clientState is one stream's status.
type clientState struct {
	node, region, zone string
	userAgent          string
	since              time.Time
	types              map[string]*typeState
}

// typeState is one resource type of a stream.
type typeState struct {
	names     map[string]struct{}
	truncated bool
	sent      string
	sentNonce string
	sentAt    time.Time
	acked     string
	ackedAt   time.Time
	nack      *Rejection
}

func newClientTable() *clientTable {
	return &clientTable{streams: map[streamKey]*clientState{}}
}

// open records a stream opened at now, unless as many as are kept are
// open.
func (t *clientTable) open(k streamKey, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.streams) < maxTrackedStreams {
		t.streams[k] = &clientState{since: now, types: map[string]*typeState{}}
	}
}

// close forgets a stream.
func (t *clientTable) close(k streamKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.streams, k)
}

// request is what the table needs of a discovery request, of either kind.
type request struct {
	node    *corev3.Node
	typeURL string
	nonce   string
	// acked is the version a state-of-the-world ACK accepts; a delta ACK
	// accepts the response its nonce names.
	acked string
	// errorDetail is the NACK's message; empty for a first request or
	// an ACK.
	errorDetail string
	nack        bool
	// names replaces the subscription (state of the world); subscribe
	// and unsubscribe change it (delta).
	names                  []string
	subscribe, unsubscribe []string
}

// request records a request of stream k received at now. It reports
// whether the stream's subscription to r's type is now over the names kept
// per type (maxNamesPerType), which a delta stream reaches by subscribing
// in several requests.
func (t *clientTable) request(k streamKey, r request, now time.Time) (over bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.streams[k]
	if c == nil {
		return false
	}
	if r.node != nil && c.node == "" {
		c.node, c.region, c.zone = clip(r.node.GetId()), clip(r.node.GetLocality().GetRegion()), clip(r.node.GetLocality().GetZone())
		c.userAgent = clip(userAgent(r.node))
	}
	ts := c.typeState(r.typeURL)
	if ts == nil {
		return false
	}
	if !k.delta {
		ts.names = map[string]struct{}{}
		ts.truncated = false
	}
	ts.subscribe(r.names)
	ts.subscribe(r.subscribe)
	for _, n := range r.unsubscribe {
		delete(ts.names, n)
	}
	switch {
	case r.nonce == "":
	case r.nack:
		rej := &Rejection{Error: clip(r.errorDetail), At: now}
		if r.nonce == ts.sentNonce {
			rej.Version = ts.sent
		}
		ts.nack = rej
	case k.delta:
		if r.nonce == ts.sentNonce {
			ts.acked, ts.ackedAt = ts.sent, now
		}
	default:
		ts.acked, ts.ackedAt = clip(r.acked), now
	}
	return ts.truncated
}

// response records a response of version with nonce sent on stream k at
// now.
func (t *clientTable) response(k streamKey, typeURL, version, nonce string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.streams[k]
	if c == nil {
		return
	}
	if ts := c.typeState(typeURL); ts != nil {
		ts.sent, ts.sentNonce, ts.sentAt = version, nonce, now
	}
}

// typeState returns the state of typeURL, created if there is room; nil
// if there is none.
func (c *clientState) typeState(typeURL string) *typeState {
	typeURL = clip(typeURL)
	ts := c.types[typeURL]
	if ts == nil && len(c.types) < maxTypesPerStream {
		ts = &typeState{names: map[string]struct{}{}}
		c.types[typeURL] = ts
	}
	return ts
}

// subscribe adds names, as many as are kept.
func (ts *typeState) subscribe(names []string) {
	for _, n := range names {
		n = clip(n)
		if _, ok := ts.names[n]; ok {
			continue
		}
		if len(ts.names) >= maxNamesPerType {
			ts.truncated = true
			return
		}
		ts.names[n] = struct{}{}
	}
}

// list copies the table, oldest stream first.
func (t *clientTable) list() []ClientStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ClientStatus, 0, len(t.streams))
	for k, c := range t.streams {
		cs := ClientStatus{Stream: k.id, Delta: k.delta, Node: c.node, Region: c.region, Zone: c.zone, UserAgent: c.userAgent, Since: c.since,
			Types: make([]TypeStatus, 0, len(c.types))}
		services := map[string]struct{}{}
		for typeURL, ts := range c.types {
			st := TypeStatus{TypeURL: typeURL, Resources: make([]string, 0, len(ts.names)), Truncated: ts.truncated,
				Sent: ts.sent, SentAt: ts.sentAt, Acked: ts.acked, AckedAt: ts.ackedAt}
			if ts.nack != nil {
				rej := *ts.nack
				st.NACK = &rej
			}
			for n := range ts.names {
				st.Resources = append(st.Resources, n)
				services[n] = struct{}{}
			}
			sort.Strings(st.Resources)
			cs.Types = append(cs.Types, st)
		}
		sort.Slice(cs.Types, func(i, j int) bool { return cs.Types[i].TypeURL < cs.Types[j].TypeURL })
		for n := range services {
			cs.Services = append(cs.Services, n)
		}
		sort.Strings(cs.Services)
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		if out[i].Delta != out[j].Delta {
			return !out[i].Delta
		}
		return out[i].Stream < out[j].Stream
	})
	return out
}

// clip cuts s to maxTextBytes, keeping it valid UTF-8.
func clip(s string) string { return clipTo(s, maxTextBytes) }
