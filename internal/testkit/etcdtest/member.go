package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/auth"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/proctest"
)

// Member is one etcd server of a Cluster together with the proxy in front
// of its client port. The proxy lives as long as the cluster; the server can
// be stopped and restarted on the same ports and data directory. With
// WithProcesses the server runs in a child process.
type Member struct {
	name           string
	dir            string
	clientURL      url.URL // where the server listens for clients
	peerURL        url.URL // where the server listens for peers
	peerFwdURL     url.URL // where peerFwd listens; the advertised peer URL
	proxyURL       url.URL // where the proxy listens
	token          string  // initial cluster token; guarded by opMu after Start
	initialCluster string
	logger         *zap.Logger
	tls            *TLSFiles   // serve clients over TLS; nil for plain
	auth           bool        // auth is (to be) enabled
	rootPassword   string      // RootUser's password with auth: the package's own clients log in (etcd 3.6 answers Status only to a user)
	authToken      string      // etcd's --auth-token with auth: "simple" or a JWT setting
	tokenTTL       uint        // simple token TTL in seconds; 0 for etcd's default
	cheapPasswords bool        // hash passwords at bcryptCost
	rpc            *rpcCounter // the cluster's request counter
	processes      bool        // run the server in a child process
	binary         string      // the etcd binary the child runs; empty for the test binary
	noFsync        bool        // binary takes --unsafe-no-fsync
	maxTxnOps      int         // operations per transaction; 0 for etcd's default
	maxReqSize     int         // bytes per request; 0 for etcd's default

	proxy   *proxy // forwards proxyURL to clientURL, with faults
	peerFwd *proxy // forwards peerFwdURL to peerURL

	id atomic.Uint64 // etcd member ID, known once started

	// opMu serialises Stop, Kill, Restart, Freeze, Thaw and the cluster's
	// Close, Backup, Restore and Wipe.
	opMu    sync.Mutex
	retired bool // the cluster is closed; guarded by opMu

	mu    sync.Mutex
	etcd  *embed.Etcd        // the in-process server, if running
	abort context.CancelFunc // aborts the RPCs in flight on etcd
	proc  *child             // the child process, if running
}

// Name returns the member's etcd name ("m0", "m1", ...).
func (m *Member) Name() string { return m.name }

// ID returns the member's etcd member ID, as in the MemberId of etcd
// response headers, so a test can tell which member served a response
// (see Cluster.MemberByID). It is known once Start returns and changes
// only with Cluster.Wipe.
func (m *Member) ID() uint64 { return m.id.Load() }

// DataDir returns the member's data directory (etcd's --data-dir). It does
// not change across restarts; Cluster.Restore and Cluster.Wipe replace its
// contents.
func (m *Member) DataDir() string { return m.dir }

// Endpoint returns the client URL of the member's proxy,
// "http://127.0.0.1:PORT" ("https://" WithTLS). It does not change across
// restarts.
func (m *Member) Endpoint() string { return m.proxyURL.String() }

// DirectEndpoint returns the member's own client URL, bypassing the proxy.
// It does not change across restarts.
func (m *Member) DirectEndpoint() string { return m.clientURL.String() }

// Stall makes the member's proxy stop forwarding in both directions
// without losing a byte, as a network partition or a frozen machine does:
// bytes the proxy has read wait in it, the rest wait in the kernel's
// buffers (TCP flow control), and all are delivered in order after Heal.
// New connections are accepted (the handshake succeeds) but nothing
// reaches the member. Requests through the proxy hang until their
// deadline; a client notices a stalled connection only through keepalive,
// which for clients made by Cluster.Client takes about 11s and happens
// only while requests or streams are open. A request whose deadline has
// not expired completes after Heal on the same connection.
func (m *Member) Stall() { m.proxy.stall() }

// Reset resets every connection through the member's proxy (a TCP RST)
// and every new one until Heal, as a crashed machine or a firewall that
// rejects does: clients see "connection reset by peer" at once, not a
// timeout. New connections are reset as soon as the proxy accepts them
// (the kernel completes the handshake, so a dial succeeds and the first
// read or write fails). The member itself is unaffected, as are clients
// that bypass the proxy.
func (m *Member) Reset() { m.proxy.resetAll() }

// Delay makes the member's proxy hold every chunk of data for d after it
// reads it, in both directions, until Heal; chunks keep their order and
// are read and held concurrently, so d is latency added to each direction
// (a round trip takes at least 2*d), not lower bandwidth. With d of 500ms
// or more, keepalive pings of clients made by Cluster.Client (1s timeout)
// fail and the clients reconnect. Calling Delay again changes d for every
// chunk still held.
func (m *Member) Delay(d time.Duration) { m.proxy.delayBy(d) }

// Heal ends every fault of the member's proxy (Stall, Reset, Delay):
// held chunks are forwarded at once, in order, and new connections go
// through. Connections reset by Reset stay closed; clients reconnect.
// Healing a proxy without faults does nothing.
func (m *Member) Heal() { m.proxy.heal() }

// Running reports whether the member's server is running (started and not
// stopped or killed). A frozen process member is running.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil || m.proc != nil
}

// Etcd returns the running embedded server, or nil while the member is
// stopped. Use Stop or Kill rather than closing it directly. It panics for
// a process member (WithProcesses), whose server is in another process.
func (m *Member) Etcd() *embed.Etcd {
	if m.processes {
		panic("etcdtest: Member.Etcd: " + m.name + " runs in a child process (WithProcesses); there is no in-process server")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// Stop stops the member's server gracefully (a leader first hands over
// leadership) and keeps its data directory and ports for Restart. RPCs in
// flight, including watch and lease keep-alive streams, end with
// codes.Unavailable. For a process member it sends SIGTERM and waits for
// the process to exit (a frozen one is thawed first). The proxy keeps
// running: new connections through it are reset at once, as connections
// to a closed port are refused. It fails the test if the member is not
// running or does not stop within 10 seconds.
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	m.stopT(t, "Stop", false)
}

// Kill stops the member's server abruptly. For a process member it sends
// SIGKILL: the process dies wherever it is, even frozen. For an in-process
// member the raft loop stops at once, without handing over leadership,
// then the listeners are closed. Data directory and ports are kept for
// Restart. What clients see is the same as for Stop. It fails the test if
// the member is not running or does not stop within 10 seconds.
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

// Freeze stops a process member's process with SIGSTOP, as a frozen
// machine or a long GC pause would: its connections stay open, the kernel
// still completes new handshakes, and nothing answers; requests to it
// hang, and the other members elect a new leader if it led. It returns once
// the kernel reports the process stopped (on Linux; a signal is delivered
// asynchronously). Undo it with Thaw. It fails the test if the member is
// not a running process member (WithProcesses) or is frozen already.
func (m *Member) Freeze(t testing.TB) {
	t.Helper()
	m.freeze(t, "Freeze", true)
}

// Thaw resumes a process frozen by Freeze (SIGCONT). It fails the test if
// the member is not a frozen process member.
func (m *Member) Thaw(t testing.TB) {
	t.Helper()
	m.freeze(t, "Thaw", false)
}

func (m *Member) freeze(t testing.TB, op string, freeze bool) {
	t.Helper()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	ch := m.proc
	var frozen bool
	if ch != nil {
		frozen = ch.frozen
	}
	m.mu.Unlock()
	switch {
	case !m.processes:
		t.Fatalf("etcdtest: %s %s: only process members (WithProcesses) can be frozen", op, m.name)
	case ch == nil:
		t.Fatalf("etcdtest: %s %s: member is not running", op, m.name)
	case frozen == freeze:
		t.Fatalf("etcdtest: %s %s: member is %s", op, m.name, map[bool]string{true: "frozen already", false: "not frozen"}[frozen])
	}
	sig := syscall.SIGCONT
	if freeze {
		sig = syscall.SIGSTOP
	}
	if err := ch.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("etcdtest: %s %s: %v", op, m.name, err)
	}
	if err := proctest.WaitState(ch.cmd.Process.Pid, freeze, stopTimeout); err != nil {
		t.Fatalf("etcdtest: %s %s: %v", op, m.name, err)
	}
	m.mu.Lock()
	ch.frozen = freeze
	m.mu.Unlock()
}

// Frozen reports whether the member is a process member frozen by Freeze.
func (m *Member) Frozen() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && m.proc.frozen
}

// Pid returns the process ID of a process member's running server
// (WithProcesses), for a test or benchmark that reads its CPU and memory
// from /proc; 0 for an in-process member or one that is stopped.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.cmd.Process.Pid
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
	return m.startLocked("existing", time.Now().Add(startTimeout))
}

// startLocked starts the member's server and waits until it serves a
// linearizable read; on failure it stops it again. state is the initial
// cluster state, "new" or "existing".
func (m *Member) startLocked(state string, deadline time.Time) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := m.launch(state)
		if err == nil {
			// A child process reports a port in use only by exiting.
			if err = m.waitReady(deadline); err != nil {
				if serr := m.stopLocked(true); serr != nil {
					return fmt.Errorf("%w (and stopping it again failed: %v)", err, serr)
				}
			}
		}
		if err == nil {
			break
		}
		// A port of ours may briefly be held by an outgoing connection
		// that the kernel gave it to while the member was down.
		if !isAddrInUse(err) || time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
	if err := m.waitServing(deadline); err != nil {
		if serr := m.stopLocked(true); serr != nil {
			err = fmt.Errorf("%w (and stopping it again failed: %v)", err, serr)
		}
		return err
	}
	return nil
}

// launch starts the member's server, in-process or as a child process,
// without waiting for it to be ready. state is the initial cluster state,
// "new" or "existing"; it does not matter once the data directory is
// initialised.
func (m *Member) launch(state string) error {
	mc := m.memberConfig(state)
	if m.processes {
		ch, err := startChild(mc)
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.proc = ch
		m.mu.Unlock()
		return nil
	}
	abortCtx, abort := context.WithCancel(context.Background())
	cfg := mc.embedConfig()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(m.logger)
	cfg.GRPCAdditionalServerOptions = append(embedetcd.AbortOptions(abortCtx), m.rpc.serverOptions()...)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		abort()
		return err
	}
	m.mu.Lock()
	m.etcd, m.abort = e, abort
	m.mu.Unlock()
	return nil
}

// waitReady waits until the launched server has joined the cluster and is
// ready to serve, and records its member ID.
func (m *Member) waitReady(deadline time.Time) error {
	m.mu.Lock()
	e, ch := m.etcd, m.proc
	m.mu.Unlock()
	switch {
	case ch != nil && m.binary != "":
		id, err := m.waitBinaryReady(ch, deadline)
		if err != nil {
			return err
		}
		m.id.Store(id)
		return nil
	case ch != nil:
		id, err := ch.waitReady(deadline)
		if err != nil {
			return err
		}
		m.id.Store(id)
		return nil
	case e != nil:
		if err := waitReady(e, deadline); err != nil {
			return err
		}
		m.id.Store(uint64(e.Server.MemberID()))
		return nil
	}
	return errors.New("member is not running")
}

// waitServing waits until the member serves a linearizable read.
func (m *Member) waitServing(deadline time.Time) error {
	if !m.processes {
		e := m.Etcd()
		if e == nil {
			return errors.New("member is not running")
		}
		return waitServing(e, deadline)
	}
	cli, err := clientv3.New(m.directConfig())
	if err != nil {
		return err
	}
	defer cli.Close()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithDeadline(context.Background(), minTime(deadline, time.Now().Add(time.Second)))
		_, err := cli.Get(ctx, probeKey)
		cancel()
		if err == nil || errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrPermissionDenied) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no linearizable read served within %v: %w", startTimeout, err)
		}
		<-tick.C
	}
}

// directConfig is the configuration of the package's own clients of this
// member alone, bypassing the proxy; with auth they log in as RootUser.
func (m *Member) directConfig() clientv3.Config {
	cfg := clientConfig([]string{m.DirectEndpoint()})
	if m.tls != nil {
		cfg.TLS = m.tls.ClientTLS()
	}
	if m.auth {
		cfg.Username, cfg.Password = RootUser, m.rootPassword
	}
	return cfg
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
	e, abort, ch := m.etcd, m.abort, m.proc
	m.etcd, m.abort, m.proc = nil, nil, nil
	m.mu.Unlock()
	if ch != nil {
		var err error
		if hard {
			ch.kill()
		} else {
			err = ch.terminate(stopTimeout)
		}
		// Peers' connections to the dead process are closed by its
		// kernel; those to the forwarder are not.
		m.peerFwd.closeConns()
		return err
	}
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
		m.peerFwd.closeConns()
		e.Close()
		// And those that peers opened in the meantime.
		m.peerFwd.closeConns()
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
	f, err := newProxy(m.peerFwdURL.Host, m.peerURL.Host)
	if err != nil {
		return fmt.Errorf("member %s: start peer forwarder on %s: %w", m.name, m.peerFwdURL.Host, err)
	}
	m.peerFwd = f
	p, err := newProxy(m.proxyURL.Host, m.clientURL.Host)
	if err != nil {
		return fmt.Errorf("member %s: start proxy on %s: %w", m.name, m.proxyURL.Host, err)
	}
	m.proxy = p
	return nil
}

// closeNetwork closes the peer forwarder and the proxy, if they were
// started, with every connection through them.
func (m *Member) closeNetwork() error {
	if m.peerFwd != nil {
		m.peerFwd.close()
	}
	if m.proxy != nil {
		m.proxy.close()
	}
	return nil
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
