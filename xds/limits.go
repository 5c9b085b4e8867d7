package xds

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
)

// limitServerOptions are the grpc.Server options that bound each
// connection; WithGRPCServerOptions's options come after them, so that a
// caller can change them.
func limitServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(maxStreamsPerConnection),
		grpc.MaxRecvMsgSize(maxRequestBytes),
	}
}

// checkRequest returns the error that ends a stream whose request breaks a
// bound (ResourceExhausted, naming the bound), or nil.
func checkRequest(node *corev3.Node, typeURL string, names ...[]string) error {
	if n := len(node.GetId()); n > maxNodeIDBytes {
		return status.Errorf(codes.ResourceExhausted, "xds: node ID of %d bytes, more than %d", n, maxNodeIDBytes)
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

// limitedListener is a listener that closes at once the connections
// accepted beyond max open ones, counting them in refused.
type limitedListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused *atomic.Uint64
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn gives its place back to its listener when closed.
type countedConn struct {
	net.Conn
	l    *limitedListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
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
