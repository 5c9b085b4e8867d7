package xds

import (
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/ratelimit"
)

// The bounds on what an xDS client may make the Server hold. ADS needs no
// credential unless WithTLS or WithTLSFiles require client certificates,
// so every bound holds for a hostile client too. A legitimate gRPC client
// opens one ADS stream per process and control plane, and names the
// services it calls: far below each bound.
const (
	// defaultMaxConnections is WithMaxConnections's default.
	defaultMaxConnections = 1024
	// defaultMaxStreams is WithMaxStreams's default.
	defaultMaxStreams = 4096
	// defaultConnectionShare and defaultStreamShare are WithClientShare's
	// defaults.
	defaultConnectionShare = 64
	defaultStreamShare     = 256
	// reserveFraction: 1/reserveFraction of the connections, of the TLS
	// handshakes and of the streams are kept for clients that hold none.
	reserveFraction = 16
	// maxHandshakes bounds the connections in their TLS handshake at once
	// (under WithTLS or WithTLSFiles, where a connection takes a
	// connection's place only once its handshake succeeded). A handshake
	// takes milliseconds, so 256 at once is a burst of hundreds of
	// clients connecting in the same instant; one refused is closed, and
	// its client retries with backoff. Their files are a quarter of the
	// connections' default bound.
	maxHandshakes = 256
	// handshakeShare bounds the handshakes of one client group at once:
	// a few processes of one host (or behind one address) reconnecting
	// together. A client without a certificate holds at most this many
	// places for at most handshakeTimeout each.
	handshakeShare = 8
	// handshakeTimeout bounds the time a connection takes to finish its
	// TLS handshake and send gRPC's preface.
	handshakeTimeout = 10 * time.Second
	// firstRequestTimeout bounds the time between a stream's start and its
	// first request; a stream silent that long ends (DeadlineExceeded).
	firstRequestTimeout = 10 * time.Second
	// maxStreamsPerConnection is the most concurrent streams a client
	// connection may open; a further stream waits for one to end.
	maxStreamsPerConnection = 16
	// maxRequestBytes is the largest request message the Server reads;
	// a larger one ends its stream (ResourceExhausted) unread.
	maxRequestBytes = 128 << 10
	// maxNodeIDBytes is the longest node ID a request may carry.
	maxNodeIDBytes = 1024
	// maxNamesPerRequest is the most resource names one request may
	// subscribe to; it is the client table's bound per type too.
	maxNamesPerRequest = maxNamesPerType
	// maxNameBytes is the longest resource name a request may subscribe
	// to: a service name (128 bytes), "~" and a color.
	maxNameBytes = 1024
	// maxNodeFieldBytes is the longest locality field (region, zone,
	// sub-zone), user agent name or version, and cluster a node may carry.
	maxNodeFieldBytes = 256
	// defaultSubscriptionBudget is WithSubscriptionBudget's default.
	defaultSubscriptionBudget = 128 << 20
	// nameOverhead is what a subscribed name is counted for beside its
	// bytes: the map entries that hold it.
	nameOverhead = 64
)

// limitServerOptions are the grpc.Server options that bound each
// connection; WithGRPCServerOptions's options come after them, so that a
// caller can change them.
func limitServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(maxStreamsPerConnection),
		grpc.MaxRecvMsgSize(maxRequestBytes),
		grpc.ConnectionTimeout(handshakeTimeout),
	}
}

// checkRequest returns the error that ends a stream whose request breaks a
// bound (ResourceExhausted, naming the bound), or nil.
func checkRequest(node *corev3.Node, typeURL string, names ...[]string) error {
	if n := len(node.GetId()); n > maxNodeIDBytes {
		return status.Errorf(codes.ResourceExhausted, "xds: node ID of %d bytes, more than %d", n, maxNodeIDBytes)
	}
	for field, v := range map[string]string{
		"locality region": node.GetLocality().GetRegion(), "locality zone": node.GetLocality().GetZone(),
		"locality sub-zone": node.GetLocality().GetSubZone(), "user agent name": node.GetUserAgentName(),
		"user agent version": node.GetUserAgentVersion(), "cluster": node.GetCluster(),
	} {
		if len(v) > maxNodeFieldBytes {
			return status.Errorf(codes.ResourceExhausted, "xds: node %s of %d bytes, more than %d", field, len(v), maxNodeFieldBytes)
		}
	}
	total := 0
	for _, list := range names {
		total += len(list)
		for _, name := range list {
			if len(name) > maxNameBytes {
				return status.Errorf(codes.ResourceExhausted, "xds: resource name %q... of %d bytes, more than %d",
					clipTo(name, 64), len(name), maxNameBytes)
			}
		}
	}
	if total > maxNamesPerRequest {
		return status.Errorf(codes.ResourceExhausted, "xds: a request for %d resources of type %s, more than %d",
			total, clipTo(typeURL, 128), maxNamesPerRequest)
	}
	return nil
}

// clipTo cuts s to at most n bytes, keeping it valid UTF-8.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 { // not in the middle of a rune
		n--
	}
	return s[:n]
}

// clipNames is names for a log line: at most 8 of them, each clipped, and
// how many were left out.
func clipNames(names []string) []string {
	const most = 8
	out := make([]string, 0, min(len(names), most+1))
	for i, n := range names {
		if i == most {
			out = append(out, fmt.Sprintf("(%d more)", len(names)-most))
			break
		}
		out = append(out, clipTo(n, 128))
	}
	return out
}

// pools returns the admission of connections, of TLS handshakes (under
// WithTLS or WithTLSFiles) and of streams o sets. The connections, the
// handshakes and the connections' Loopback places together stay within
// the listener's file budget (admission.Split).
func (o *options) pools() (conns, handshakes, streams *admission.Pool) {
	hs := 0
	if o.tls() {
		hs = maxHandshakes
	}
	places := admission.Split(o.maxConns, hs, admission.LoopbackPlaces)
	conns = &admission.Pool{What: "connections", Max: places[0], Share: o.connShare, Reserve: places[0] / reserveFraction, Loopback: places[2], IPv4Bits: o.ipv4Bits}
	handshakes = &admission.Pool{What: "TLS handshakes in progress", Max: places[1], Share: handshakeShare, Reserve: places[1] / reserveFraction, IPv4Bits: o.ipv4Bits}
	streams = &admission.Pool{What: "streams", Max: o.maxStreams, Share: o.streamShare, Reserve: o.maxStreams / reserveFraction, IPv4Bits: o.ipv4Bits}
	return conns, handshakes, streams
}

// gatedADS is the ADS service with a deadline on each stream's first
// request: a stream that sends none within firstRequestTimeout ends with
// DeadlineExceeded. It also trims each request's node (trimNode).
type gatedADS struct {
	discoveryv3.AggregatedDiscoveryServiceServer
}

// StreamAggregatedResources serves a state-of-the-world stream.
func (a gatedADS) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	g := &gatedSotW{AggregatedDiscoveryService_StreamAggregatedResourcesServer: st}
	return g.gate.end(a.AggregatedDiscoveryServiceServer.StreamAggregatedResources(g))
}

// DeltaAggregatedResources serves a delta stream.
func (a gatedADS) DeltaAggregatedResources(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	g := &gatedDelta{AggregatedDiscoveryService_DeltaAggregatedResourcesServer: st}
	return g.gate.end(a.AggregatedDiscoveryServiceServer.DeltaAggregatedResources(g))
}

type gatedSotW struct {
	discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	gate firstRequest
}

func (g *gatedSotW) Recv() (*discoveryv3.DiscoveryRequest, error) {
	req, err := recvFirst(&g.gate, g.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Recv)
	if err == nil {
		req.Node = trimNode(req.GetNode())
	}
	return req, err
}

type gatedDelta struct {
	discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	gate firstRequest
}

func (g *gatedDelta) Recv() (*discoveryv3.DeltaDiscoveryRequest, error) {
	req, err := recvFirst(&g.gate, g.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Recv)
	if err == nil {
		req.Node = trimNode(req.GetNode())
	}
	return req, err
}

// trimNode keeps of a request's node what the Server uses (its ID,
// cluster, locality and user agent), so that a stream holds no more of it
// than that: go-control-plane keeps each stream's node, and a node's
// metadata, extensions and addresses may fill a request.
func trimNode(n *corev3.Node) *corev3.Node {
	if n == nil {
		return nil
	}
	out := &corev3.Node{Id: n.GetId(), Cluster: n.GetCluster(), UserAgentName: n.GetUserAgentName()}
	if l := n.GetLocality(); l != nil {
		out.Locality = &corev3.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	}
	if v := n.GetUserAgentVersion(); v != "" {
		out.UserAgentVersionType = &corev3.Node_UserAgentVersion{UserAgentVersion: v}
	}
	return out
}

// namesSize is what names are counted for in the subscription budget.
func namesSize(names []string) int64 {
	var n int64
	for _, name := range names {
		n += int64(len(name)) + nameOverhead
	}
	return n
}

// firstRequest is the deadline of a stream's first request. Its zero
// value is waiting; it is used by the stream's one receiving goroutine.
type firstRequest struct {
	arrived, expired bool
}

// errNoRequest is the status of a stream that sent no request in time.
var errNoRequest = status.Errorf(codes.DeadlineExceeded, "xds: no request within %v of the stream's start", firstRequestTimeout)

// recvFirst calls recv. Until a first request has arrived, it waits for
// one at most firstRequestTimeout and then returns errNoRequest, leaving
// recv to return when the stream ends (go-control-plane then ends the
// stream; end gives it its status). After the first request it is recv.
func recvFirst[T any](f *firstRequest, recv func() (T, error)) (T, error) {
	if f.arrived {
		return recv()
	}
	type result struct {
		req T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		req, err := recv()
		ch <- result{req, err}
	}()
	t := time.NewTimer(firstRequestTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		f.arrived = r.err == nil
		return r.req, r.err
	case <-t.C:
		f.expired = true
		var zero T
		return zero, errNoRequest
	}
}

// end returns the status a stream's handler ends with: errNoRequest if no
// request came in time, else err.
func (f *firstRequest) end(err error) error {
	if f.expired {
		return errNoRequest
	}
	return err
}

// logBurst and logEvery rate-limit each kind of warning a client can cause
// (a NACK, a refused stream): a burst of logBurst lines, then one every
// logEvery; the lines held back are counted and said by the next one.
const (
	logBurst = 10
	logEvery = time.Second
)

// newLogLimit returns the rate limit of one kind of warning.
func newLogLimit() *ratelimit.Bucket { return &ratelimit.Bucket{Burst: logBurst, Every: logEvery} }
