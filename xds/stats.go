package xds

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/ratelimit"
)

// Stats is what a Server counts since New.
type Stats struct {
	// Clients is the number of ADS streams served, state-of-the-world and
	// delta: those open whose first request admitted them.
	Clients int64
	// Requests counts discovery requests received (first requests, ACKs
	// and NACKs).
	Requests uint64
	// ACKs counts requests accepting a response.
	ACKs uint64
	// NACKs counts requests rejecting a response (each is logged with
	// the client's error detail). A rejected version is never sent again.
	NACKs uint64
	// Skipped counts instances left out because xDS cannot express them
	// (an address that is not host:port, a duplicate address), each
	// counted once while it stays bad.
	Skipped uint64
	// Protected counts updates withheld by empty-list protection.
	Protected uint64
	// TLSReloads counts the times WithTLSFiles's files were read again
	// after a change and loaded.
	TLSReloads uint64
	// TLSReloadErrors counts the changes of WithTLSFiles's files that did
	// not load (each logged; the last good certificate stays in use).
	TLSReloadErrors uint64
	// Services is the number of services published (those whose list is
	// known).
	Services int
	// Forgotten counts the services unpublished because they were gone
	// from the registry (WithForgetAfter).
	Forgotten uint64
	// Zones are the client localities served their own endpoint
	// priorities, as "zone", or "region/zone" for a client with a
	// region ("" for clients without a locality), sorted.
	Zones []string
	// Pushes counts, per service, the resources sent to clients, by type:
	// one per resource per response per stream.
	Pushes map[string]Pushes
	// Refused counts streams ended for breaking a bound on what a client
	// may make the Server hold (a node ID, a resource name or a
	// subscription too large, too many streams in all or from one client;
	// see WithMaxStreams, WithClientShare), each with a ResourceExhausted
	// status naming the bound.
	Refused uint64
	// RefusedConnections counts connections Serve closed at once because
	// their client held its share, or every place was taken
	// (WithMaxConnections, WithClientShare); under TLS, at the end of
	// their handshake.
	RefusedConnections uint64
	// Connections is the number of client connections Serve holds: under
	// TLS (WithTLS, WithTLSFiles) those whose handshake succeeded.
	Connections int
	// Handshakes is the number of connections in their TLS handshake (at
	// most 256, 8 per client; none in plaintext).
	Handshakes int
	// RefusedHandshakes counts connections Serve closed as soon as
	// accepted under TLS because their client held its share of the
	// handshakes in progress, or every place was taken.
	RefusedHandshakes uint64
	// SubscriptionBytes is what the open streams' subscriptions are
	// counted for: each name's bytes and 64 more (WithSubscriptionBudget).
	SubscriptionBytes int64
	// SelfCheckViolations counts the breaches of a client's precondition
	// found in published resources with WithSelfCheck, each logged.
	SelfCheckViolations uint64
	// SuppressedLogs counts warnings not logged because one kind of
	// warning (a NACK, a refusal) came more often than once a second
	// after a burst; the next line logged says how many it follows.
	SuppressedLogs uint64
}

// Pushes counts the resources of one service sent to clients.
type Pushes struct {
	Listeners, Routes, Clusters, Endpoints uint64
}

// Total is the sum of the counts.
func (p Pushes) Total() uint64 { return p.Listeners + p.Routes + p.Clusters + p.Endpoints }

// Stats returns the Server's counters. It does not block on I/O.
func (s *Server) Stats() Stats {
	st := s.stats.snapshot()
	st.Protected = s.p.Stats().Protected
	st.Services = s.c.published()
	st.Zones = s.c.zones()
	st.RefusedConnections = s.stats.conns.Refused()
	st.Connections = s.stats.conns.Held()
	st.Handshakes = s.stats.handshakes.Held()
	st.RefusedHandshakes = s.stats.handshakes.Refused()
	return st
}

// stats implements go-control-plane's callbacks: it counts streams,
// requests, ACKs, NACKs and pushed resources, and logs NACKs.
type stats struct {
	log        *slog.Logger
	conns      *admission.Pool // the connections Serve admits, by client address
	handshakes *admission.Pool // under TLS, the connections in their handshake
	streams    *admission.Pool // the streams admitted, by client address
	budget     int64           // WithSubscriptionBudget
	requests   atomic.Uint64
	acks       atomic.Uint64
	nacks      atomic.Uint64
	skipped    atomic.Uint64

	tlsReloads, tlsReloadErrors atomic.Uint64
	forgotten                   atomic.Uint64
	refused                     atomic.Uint64
	suppressed                  atomic.Uint64
	violations                  atomic.Uint64
	nackLog, refusalLog         *ratelimit.Bucket

	table *clientTable

	mu         sync.Mutex
	pushes     map[string]*Pushes
	deltaNodes map[int64]*corev3.Node     // the node of each delta stream (only its first request carries it)
	open       map[streamKey]*streamPlace // every open stream, admitted or not
	retained   int64                      // the sum of every open stream's sizes, at most budget
}

// streamPlace is an open stream: its client's address and, once its first
// request admitted it, the release of its place in stats.streams and the
// size of its subscription to each type (namesSize).
type streamPlace struct {
	peer    string
	release func()
	sizes   map[string]int64
}

var _ serverv3.Callbacks = (*stats)(nil)

// newStats returns the counters of a Server with options o.
func newStats(o *options) *stats {
	conns, handshakes, streams := o.pools()
	return &stats{log: o.log, conns: conns, handshakes: handshakes, streams: streams, budget: int64(o.budget), table: newClientTable(), pushes: map[string]*Pushes{},
		deltaNodes: map[int64]*corev3.Node{}, open: map[streamKey]*streamPlace{},
		nackLog: newLogLimit(), refusalLog: newLogLimit()}
}

func (st *stats) snapshot() Stats {
	out := Stats{
		Clients:  int64(st.streams.Held()),
		Requests: st.requests.Load(),
		ACKs:     st.acks.Load(),
		NACKs:    st.nacks.Load(),
		Skipped:  st.skipped.Load(),

		TLSReloads:      st.tlsReloads.Load(),
		TLSReloadErrors: st.tlsReloadErrors.Load(),
		Forgotten:       st.forgotten.Load(),
		Pushes:          map[string]Pushes{},

		Refused:        st.refused.Load(),
		SuppressedLogs: st.suppressed.Load(),

		SelfCheckViolations: st.violations.Load(),
	}
	st.mu.Lock()
	out.SubscriptionBytes = st.retained
	for svc, p := range st.pushes {
		out.Pushes[svc] = *p
	}
	st.mu.Unlock()
	return out
}

// OnStreamOpen notes the client address of a stream: the stream is
// admitted, and counted, by its first request (admit).
func (st *stats) OnStreamOpen(ctx context.Context, id int64, _ string) error {
	st.opened(ctx, streamKey{id: id})
	return nil
}

// opened notes stream k open, from the client of ctx.
func (st *stats) opened(ctx context.Context, k streamKey) {
	var peerAddr string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		peerAddr = p.Addr.String()
	}
	st.mu.Lock()
	st.open[k] = &streamPlace{peer: peerAddr}
	st.mu.Unlock()
}

// admit gives stream k a place in st.streams at its first request, or
// returns the error that refuses it (ResourceExhausted, naming the bound;
// the stream is then not counted). Its later requests have their place.
func (st *stats) admit(k streamKey, node *corev3.Node) error {
	st.mu.Lock()
	p := st.open[k]
	if p == nil { // not opened through OnStreamOpen: keyed by nothing
		p = &streamPlace{}
		st.open[k] = p
	}
	if p.release != nil {
		st.mu.Unlock()
		return nil
	}
	release, err := st.streams.Acquire(p.peer)
	if err == nil {
		p.release, p.sizes = release, map[string]int64{}
	}
	st.mu.Unlock()
	if err != nil {
		err = status.Errorf(codes.ResourceExhausted, "xds: %v", err)
		st.refuse(node, err)
		return err
	}
	st.table.open(k, time.Now())
	return nil
}

// closed takes stream k off, and gives its place back if it had one.
func (st *stats) closed(k streamKey) {
	st.mu.Lock()
	p := st.open[k]
	delete(st.open, k)
	if k.delta {
		delete(st.deltaNodes, k.id)
	}
	if p != nil && p.release != nil {
		for _, n := range p.sizes {
			st.retained -= n
		}
		p.release()
		st.table.close(k)
	}
	st.mu.Unlock()
}

// subscribe counts what stream k's subscription to typeURL holds after a
// request: names replace the type's subscription (state of the world), or
// add to it and unsubscribe take from it (delta). It returns the error
// that ends the stream when the streams' subscriptions would hold more
// than the budget (the request is then not counted).
func (st *stats) subscribe(k streamKey, node *corev3.Node, typeURL string, replace bool, names, unsubscribe []string) error {
	st.mu.Lock()
	p := st.open[k]
	if p == nil || p.sizes == nil {
		st.mu.Unlock()
		return nil
	}
	size := namesSize(names)
	if !replace {
		size = max(0, p.sizes[typeURL]+size-namesSize(unsubscribe))
	}
	grow := size - p.sizes[typeURL]
	if grow > 0 && st.retained+grow > st.budget {
		retained := st.retained
		st.mu.Unlock()
		err := status.Errorf(codes.ResourceExhausted,
			"xds: the streams' subscriptions hold %d KiB, and this one would pass the %d KiB this control plane keeps for them",
			retained>>10, st.budget>>10)
		st.refuse(node, err)
		return err
	}
	st.retained += grow
	p.sizes[typeURL] = size
	st.mu.Unlock()
	return nil
}

// refuse counts a refused stream and logs it, rate-limited.
func (st *stats) refuse(node *corev3.Node, err error) {
	st.refused.Add(1)
	if ok, n := st.refusalLog.Allow(time.Now()); ok {
		st.log.Warn("xds: stream refused", "node", clipTo(node.GetId(), 128), "error", err, "suppressed_before", n)
	} else {
		st.suppressed.Add(1)
	}
}

// OnStreamClosed counts a client gone, if its stream was admitted.
func (st *stats) OnStreamClosed(id int64, _ *corev3.Node) {
	st.closed(streamKey{id: id})
}

// OnStreamRequest counts a request, an ACK or a NACK; a NACK is logged with
// the client's error.
func (st *stats) OnStreamRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	st.requests.Add(1)
	if err := checkRequest(req.GetNode(), req.GetTypeUrl(), req.GetResourceNames()); err != nil {
		st.refuse(req.GetNode(), err)
		return err
	}
	if err := st.admit(streamKey{id: id}, req.GetNode()); err != nil {
		return err
	}
	if err := st.subscribe(streamKey{id: id}, req.GetNode(), req.GetTypeUrl(), true, req.GetResourceNames(), nil); err != nil {
		return err
	}
	st.table.request(streamKey{id: id}, request{
		node: req.GetNode(), typeURL: req.GetTypeUrl(), nonce: req.GetResponseNonce(), acked: req.GetVersionInfo(),
		nack: req.GetErrorDetail() != nil, errorDetail: req.GetErrorDetail().GetMessage(), names: req.GetResourceNames(),
	}, time.Now())
	if req.GetResponseNonce() == "" {
		return nil
	}
	if req.GetErrorDetail() == nil {
		st.acks.Add(1)
		return nil
	}
	st.nack(req.GetNode(), "stream", id, "type", clipTo(req.GetTypeUrl(), 128), "resources", clipNames(req.GetResourceNames()),
		"accepted_version", clipTo(req.GetVersionInfo(), 128), "nonce", clipTo(req.GetResponseNonce(), 128),
		"error", clipTo(req.GetErrorDetail().GetMessage(), maxTextBytes))
	return nil
}

// nack counts a NACK of the client node and logs it, its texts clipped and
// rate-limited (a client that NACKs every response cannot flood the log).
func (st *stats) nack(node *corev3.Node, attrs ...any) {
	st.nacks.Add(1)
	ok, n := st.nackLog.Allow(time.Now())
	if !ok {
		st.suppressed.Add(1)
		return
	}
	st.log.Warn("xds: client rejected a response; it keeps its last accepted version until the next change",
		append([]any{"node", clipTo(node.GetId(), 128), "zone", clipTo(node.GetLocality().GetZone(), 128),
			"suppressed_before", n}, attrs...)...)
}

// OnStreamResponse counts the resources sent, per service.
func (st *stats) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	st.table.response(streamKey{id: id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), time.Now())
	st.countPushes(resp.GetTypeUrl(), len(resp.GetResources()), func(i int) string {
		return resourceName(resp.GetResources()[i].GetValue())
	})
}

// countPushes counts n resources of typeURL sent, the i-th named name(i).
func (st *stats) countPushes(typeURL string, n int, name func(i int) string) {
	if n == 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range n {
		svc := name(i)
		p := st.pushes[svc]
		if p == nil {
			p = &Pushes{}
			st.pushes[svc] = p
		}
		switch typeURL {
		case resourcev3.ListenerType:
			p.Listeners++
		case resourcev3.RouteType:
			p.Routes++
		case resourcev3.ClusterType:
			p.Clusters++
		case resourcev3.EndpointType:
			p.Endpoints++
		}
	}
}

// resourceName reads field 1 of a serialized Listener, RouteConfiguration,
// Cluster (name) or ClusterLoadAssignment (cluster_name), without decoding
// the rest. Every resource a Server publishes is named after its service.
func resourceName(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ""
			}
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}

// The unused callbacks of go-control-plane.

// OnFetchRequest accepts REST requests (the cache refuses them).
func (st *stats) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error { return nil }

// OnFetchResponse does nothing.
func (st *stats) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}

// OnDeltaStreamOpen notes the client address of a delta stream: the
// stream is admitted, and counted, by its first request.
func (st *stats) OnDeltaStreamOpen(ctx context.Context, id int64, _ string) error {
	st.opened(ctx, streamKey{delta: true, id: id})
	return nil
}

// OnDeltaStreamClosed counts a client gone, if its stream was admitted.
func (st *stats) OnDeltaStreamClosed(id int64, _ *corev3.Node) {
	st.closed(streamKey{delta: true, id: id})
}

// OnStreamDeltaRequest counts a request, an ACK or a NACK of a delta
// stream; a NACK is logged with the client's error. Only a stream's first
// request carries the client's node: it is kept until the stream closes.
func (st *stats) OnStreamDeltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
	st.requests.Add(1)
	if err := checkRequest(req.GetNode(), req.GetTypeUrl(), req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()); err != nil {
		st.refuse(req.GetNode(), err)
		return err
	}
	if err := st.admit(streamKey{delta: true, id: id}, req.GetNode()); err != nil {
		return err
	}
	if err := st.subscribe(streamKey{delta: true, id: id}, req.GetNode(), req.GetTypeUrl(), false,
		req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()); err != nil {
		return err
	}
	st.mu.Lock()
	node := req.GetNode()
	if node != nil {
		st.deltaNodes[id] = node
	} else {
		node = st.deltaNodes[id]
	}
	st.mu.Unlock()
	if over := st.table.request(streamKey{delta: true, id: id}, request{
		node: node, typeURL: req.GetTypeUrl(), nonce: req.GetResponseNonce(),
		nack: req.GetErrorDetail() != nil, errorDetail: req.GetErrorDetail().GetMessage(),
		subscribe: req.GetResourceNamesSubscribe(), unsubscribe: req.GetResourceNamesUnsubscribe(),
	}, time.Now()); over {
		err := status.Errorf(codes.ResourceExhausted, "xds: a subscription to more than %d resources of type %s",
			maxNamesPerType, clipTo(req.GetTypeUrl(), 128))
		st.refuse(node, err)
		return err
	}
	switch {
	case req.GetResponseNonce() == "":
	case req.GetErrorDetail() == nil:
		st.acks.Add(1)
	default:
		st.nack(node, "delta_stream", id, "type", clipTo(req.GetTypeUrl(), 128), "nonce", clipTo(req.GetResponseNonce(), 128),
			"error", clipTo(req.GetErrorDetail().GetMessage(), maxTextBytes))
	}
	return nil
}

// OnStreamDeltaResponse counts the resources sent, per service (removals
// are not counted).
func (st *stats) OnStreamDeltaResponse(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
	st.table.response(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), time.Now())
	st.countPushes(resp.GetTypeUrl(), len(resp.GetResources()), func(i int) string {
		return resp.GetResources()[i].GetName()
	})
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}
