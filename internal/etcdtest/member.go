package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/auth"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/musterhq/muster/internal/embedetcd"
)

// Member is one etcd server of a Cluster together with the proxy in front
// of its client port. The proxy lives as long as the cluster; the server can
// be stopped and restarted on the same ports and data directory.
type Member struct {
	name           string
	dir            string
	clientURL      url.URL // where the server listens for clients
	peerURL        url.URL // where the server listens for peers
	peerFwdURL     url.URL // where peerFwd listens; the advertised peer URL
	proxyURL       url.URL // where the proxy listens
	token          string
	initialCluster string
	logger         *zap.Logger
	tls            *TLSFiles   // serve clients over TLS; nil for plain
	auth           bool        // auth is (to be) enabled
	tokenTTL       uint        // simple token TTL in seconds; 0 for etcd's default
	rpc            *rpcCounter // the cluster's request counter

	proxy        proxy.Server
	proxyDrained chan struct{} // closed when the proxy's error drain ends
	peerFwd      *forwarder    // forwards peerFwdURL to peerURL

	// opMu serialises Stop, Kill, Restart and the cluster's Close.
	opMu    sync.Mutex
	retired bool // the cluster is closed; guarded by opMu

	mu    sync.Mutex
	etcd  *embed.Etcd
	abort context.CancelFunc // aborts the RPCs in flight on etcd
}

// Name returns the member's etcd name ("m0", "m1", ...).
func (m *Member) Name() string { return m.name }

// Endpoint returns the client URL of the member's proxy,
// "http://127.0.0.1:PORT" ("https://" WithTLS). It does not change across
// restarts.
func (m *Member) Endpoint() string { return m.proxyURL.String() }

// DirectEndpoint returns the member's own client URL, bypassing the proxy.
// It does not change across restarts.
func (m *Member) DirectEndpoint() string { return m.clientURL.String() }

// Proxy returns the proxy in front of the member's client port, for faults
// the helpers below do not cover. Do not close it; Cluster.Close does.
func (m *Member) Proxy() proxy.Server { return m.proxy }

// Blackhole makes the proxy drop all bytes in both directions while keeping
// connections open, as a network partition would. Requests through the
// proxy hang until their deadline. A client notices that its connection is
// dead only through keepalive, which for clients made by Cluster.Client
// takes about 11s and happens only while requests or streams are open;
// new connections through the proxy hang as well. Undo it with
// Unblackhole.
func (m *Member) Blackhole() {
	m.proxy.BlackholeTx()
	m.proxy.BlackholeRx()
}

// Unblackhole makes the proxy forward traffic again. A connection that lost
// bytes while blackholed is usually broken (the HTTP/2 header compression
// state of its ends no longer match), so the client replaces it: the first
// requests after Unblackhole may fail or take a little longer, and a client
// that was already reconnecting first waits for its pending attempt to
// time out (1s for Cluster.Client).
func (m *Member) Unblackhole() {
	m.proxy.UnblackholeTx()
	m.proxy.UnblackholeRx()
}

// Delay makes the proxy hold every chunk of data it reads for d before
// forwarding it, in both directions. Chunks of one connection wait one after
// another, so a request/response round trip takes at least 2*d, and often a
// multiple of that because gRPC writes a response in several chunks. With d
// of 500ms or more, keepalive pings of clients made by Cluster.Client (1s
// timeout) fail and the clients reconnect. Undo it with Undelay.
func (m *Member) Delay(d time.Duration) {
	m.proxy.DelayTx(d, 0)
	m.proxy.DelayRx(d, 0)
}

// Undelay removes the latency added by Delay for data read from then on;
// chunks the proxy already holds are still delayed.
func (m *Member) Undelay() {
	m.proxy.UndelayTx()
	m.proxy.UndelayRx()
}

// Running reports whether the member's server is running (started and not
// stopped or killed).
func (m *Member) Running() bool { return m.Etcd() != nil }

// Etcd returns the running embedded server, or nil while the member is
// stopped. Use Stop or Kill rather than closing it directly.
func (m *Member) Etcd() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// Stop stops the member's server gracefully (a leader first hands over
// leadership) and keeps its data directory and ports for Restart. RPCs in
// flight, including watch and lease keep-alive streams, end with
// codes.Unavailable. The proxy keeps running: new connections through it
// are accepted but never answered, so clients see their deadlines expire.
// It fails the test if the member is not running or does not stop within
// 10 seconds.
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	m.stopT(t, "Stop", false)
}

// Kill stops the member's server abruptly: the raft loop stops at once,
// without handing over leadership, then the listeners are closed. Data
// directory and ports are kept for Restart. What clients see is the same
// as for Stop. It fails the test if the member is not running or does not
// stop within 10 seconds.
func (m *Member) Kill(t testing.TB) {
	t.Helper()
	m.stopT(t, "Kill", true)
}

func (m *Member) stopT(t testing.TB, op string, hard bool) {
	t.Helper()
	if !m.Running() {
		t.Fatalf("etcdtest: %s %s: member is not running", op, m.name)
	}
	if err := m.stop(hard); err != nil {
		t.Fatalf("etcdtest: %s %s: %v", op, m.name, err)
	}
}

// Restart starts the member's server again on the same ports and data
// directory, so it keeps its data and, in a three-member cluster, rejoins
// as an existing member. It waits until the member is ready and serves a
// linearizable read, which needs a quorum of running members. It fails the
// test if the member is running or is not serving within 15 seconds.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	if err := m.restart(); err != nil {
		t.Fatalf("etcdtest: Restart %s: %v", m.name, err)
	}
}

func (m *Member) restart() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.retired {
		return errors.New("the cluster is closed")
	}
	if m.Running() {
		return errors.New("member is running; Stop or Kill it first")
	}
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		e, abort, err := m.launch("existing")
		if err == nil {
			m.setEtcd(e, abort)
			break
		}
		// A port of ours may briefly be held by an outgoing connection
		// that the kernel gave it to while the member was down.
		if !isAddrInUse(err) || time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
	err := waitReady(m.Etcd(), deadline)
	if err == nil {
		err = waitServing(m.Etcd(), deadline)
	}
	if err != nil {
		if serr := m.stopLocked(true); serr != nil {
			err = fmt.Errorf("%w (and stopping it again failed: %v)", err, serr)
		}
		return err
	}
	return nil
}

// launch starts the member's server without waiting for it to be ready.
// state is the initial cluster state, "new" or "existing"; it does not
// matter once the data directory is initialised.
func (m *Member) launch(state string) (*embed.Etcd, context.CancelFunc, error) {
	abortCtx, abort := context.WithCancel(context.Background())
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.proxyURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerFwdURL}
	cfg.InitialCluster = m.initialCluster
	cfg.InitialClusterToken = m.token
	cfg.ClusterState = state
	cfg.TickMs = tickMs
	cfg.ElectionMs = electionMs
	cfg.UnsafeNoFsync = true // the data only has to survive within this process
	cfg.EnableGRPCGateway = false
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(m.logger)
	cfg.GRPCAdditionalServerOptions = append(embedetcd.AbortOptions(abortCtx), m.rpc.serverOptions()...)
	if m.tls != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       m.tls.ServerCertFile,
			KeyFile:        m.tls.ServerKeyFile,
			TrustedCAFile:  m.tls.CAFile,
			ClientCertAuth: true,
		}
	}
	if m.auth {
		cfg.AuthToken = "simple"
		cfg.BcryptCost = bcryptCost
		if m.tokenTTL > 0 {
			cfg.AuthTokenTTL = m.tokenTTL
		}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		abort()
		return nil, nil, err
	}
	return e, abort, nil
}

func (m *Member) setEtcd(e *embed.Etcd, abort context.CancelFunc) {
	m.mu.Lock()
	m.etcd, m.abort = e, abort
	m.mu.Unlock()
}

// stop stops the server if it is running; hard skips the leadership
// transfer.
func (m *Member) stop(hard bool) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.stopLocked(hard)
}

// retire stops the server abruptly for good: Restart fails afterwards.
func (m *Member) retire() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.retired = true
	return m.stopLocked(true)
}

func (m *Member) stopLocked(hard bool) error {
	m.mu.Lock()
	e, abort := m.etcd, m.abort
	m.etcd, m.abort = nil, nil
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	// Without this, embed.Etcd.Close waits for open watch streams until
	// the server's request timeout (over 5s) runs out.
	abort()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if hard {
			e.Server.HardStop()
		} else {
			e.Server.Stop() // hands over leadership first
		}
		// Cut the raft connections to the member, so that its peer
		// server does not wait for them while closing.
		m.peerFwd.dropConns()
		e.Close()
		// And those that peers opened in the meantime.
		m.peerFwd.dropConns()
	}()
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return fmt.Errorf("member %s did not stop within %v", m.name, stopTimeout)
	}
}

// startNetwork starts the proxy in front of the member's client port and
// the forwarder in front of its peer port.
func (m *Member) startNetwork() error {
	f, err := newForwarder(m.peerFwdURL.Host, m.peerURL.Host)
	if err != nil {
		return fmt.Errorf("member %s: start peer forwarder on %s: %w", m.name, m.peerFwdURL.Host, err)
	}
	m.peerFwd = f
	p := proxy.NewServer(proxy.ServerConfig{
		Logger: zap.NewNop(),
		From:   m.proxyURL,
		To:     m.clientURL,
	})
	select {
	case <-p.Ready():
	case <-p.Done():
		// NewServer failed to listen and closed itself.
		return fmt.Errorf("member %s: start proxy on %s: %w", m.name, m.proxyURL.Host, <-p.Error())
	}
	m.proxy = p
	m.proxyDrained = make(chan struct{})
	// The proxy reports every failed dial or copy on a 16-slot channel and
	// stops accepting connections once that is full, which would happen
	// while the member is down. Nobody needs the errors, so drop them.
	go func() {
		defer close(m.proxyDrained)
		for {
			select {
			case <-p.Error():
			case <-p.Done():
				return
			}
		}
	}()
	return nil
}

// closeNetwork closes the peer forwarder and the proxy, if they were
// started. The proxy waits until every connection through it is closed,
// which is immediate once the member's server is stopped; closeNetwork
// gives up after stopTimeout.
func (m *Member) closeNetwork() error {
	if m.peerFwd != nil {
		m.peerFwd.close()
	}
	if m.proxy == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- m.proxy.Close() }()
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		<-m.proxyDrained
		if err != nil {
			return fmt.Errorf("member %s: close proxy: %w", m.name, err)
		}
		return nil
	case <-timer.C:
		return fmt.Errorf("member %s: proxy did not close within %v (a connection through it is still open)", m.name, stopTimeout)
	}
}

// waitReady waits until e has joined the cluster and is ready to serve.
func waitReady(e *embed.Etcd, deadline time.Time) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("server failed before it was ready: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("server stopped before it was ready")
	case <-timer.C:
		return fmt.Errorf("server not ready within %v (is a quorum of members running?)", startTimeout)
	}
}

// waitServing waits until e serves a linearizable read. With auth
// enabled, the read is refused for lack of a user, but only after the
// linearizable wait: the refusal shows that the member serves.
func waitServing(e *embed.Etcd, deadline time.Time) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithDeadline(context.Background(), minTime(deadline, time.Now().Add(time.Second)))
		_, err := e.Server.Range(ctx, &pb.RangeRequest{Key: []byte(probeKey)})
		cancel()
		if err == nil || errors.Is(err, auth.ErrUserEmpty) || errors.Is(err, auth.ErrPermissionDenied) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no linearizable read served within %v: %w", startTimeout, err)
		}
		<-tick.C
	}
}
