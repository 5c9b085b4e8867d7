package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/musterhq/muster/internal/testkit/proctest"
)

const (
	defaultSize = 1

	// Raft timing. Short enough for fast elections, long enough that a
	// loaded 2-core machine running -race does not trigger spurious ones.
	tickMs     = 10
	electionMs = 100

	// startTimeout bounds Start and Restart: members ready, leader known,
	// linearizable read served.
	startTimeout = 15 * time.Second
	// leaderTimeout bounds WaitLeader.
	leaderTimeout = 10 * time.Second
	// stopTimeout bounds the shutdown of one member.
	stopTimeout = 10 * time.Second
	// opTimeout bounds single requests made by the package itself.
	opTimeout = 5 * time.Second
	// pollInterval is how often bounded waits re-check their condition.
	pollInterval = 5 * time.Millisecond
	// startAttempts is how often Start retries when a port it picked was
	// taken by someone else in the meantime.
	startAttempts = 3

	// Client settings for Cluster.Client.
	clientDialTimeout = 2 * time.Second
	// clientKeepAliveTime is gRPC's minimum; it raises lower values to it.
	clientKeepAliveTime     = 10 * time.Second
	clientKeepAliveTimeout  = time.Second
	clientBackoffBaseDelay  = 50 * time.Millisecond
	clientBackoffMaxDelay   = 500 * time.Millisecond
	clientMinConnectTimeout = time.Second

	// probeKey is the key read to check that a member serves requests.
	probeKey = "etcdtest/probe"
)

// clusterSeq makes initial cluster tokens unique within the process, so a
// member of one cluster never accepts raft traffic meant for another.
var clusterSeq atomic.Int64

// Option configures Start.
type Option func(*options)

type options struct {
	size          int
	logger        *zap.Logger
	tls           bool
	auth          bool
	rootPassword  string
	tokenTTL      time.Duration
	cheapHashes   bool // WithCheapPasswords (WithAuth implies it)
	processes     bool
	binary        string // WithBinary; empty for embedded servers
	binaryNoFsync bool   // the binary takes --unsafe-no-fsync
	jwt           bool   // WithJWT
	maxTxnOps     int    // 0: etcd's default
	maxTxnOpsSet  bool   // WithMaxTxnOps was given
	maxReqSize    int    // WithMaxRequestBytes; 0: etcd's default
}

// WithSize sets the number of members. Supported sizes are 1 (the default)
// and 3; Start fails the test for any other value.
func WithSize(n int) Option {
	return func(o *options) { o.size = n }
}

// WithLogger sets the logger of the etcd servers. The default discards all
// logs; pass zaptest.NewLogger(t) to debug a test. A nil logger keeps the
// default.
func WithLogger(lg *zap.Logger) Option {
	return func(o *options) {
		if lg != nil {
			o.logger = lg
		}
	}
}

// Cluster is a running set of embedded etcd members, each behind its own
// proxy. Create it with Start.
type Cluster struct {
	t       testing.TB
	members []*Member
	tls     *TLSFiles // nil without WithTLS
	// rootPassword is RootUser's password; empty without WithAuth.
	rootPassword string
	rpc          *rpcCounter
	processes    bool // WithProcesses

	mu      sync.Mutex
	closed  bool
	clients []func() // closers of the clients made by Client

	closeOnce sync.Once
}

// Start starts an etcd cluster (one member unless WithSize says otherwise),
// waits until every member is ready, a leader is elected and every member
// serves a linearizable read, and registers Close with t.Cleanup. It fails
// the test if the cluster does not come up within 15 seconds.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	o := options{size: defaultSize, logger: zap.NewNop()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.size != 1 && o.size != 3 {
		t.Fatalf("etcdtest: unsupported cluster size %d: use WithSize(1) or WithSize(3)", o.size)
	}
	if o.maxTxnOps < 0 || o.maxTxnOps == 0 && o.maxTxnOpsSet {
		t.Fatalf("etcdtest: WithMaxTxnOps(%d): must be at least 1", o.maxTxnOps)
	}
	if o.maxReqSize < 0 {
		t.Fatalf("etcdtest: WithMaxRequestBytes(%d): must be at least 1", o.maxReqSize)
	}
	if o.jwt && !o.auth {
		t.Fatalf("etcdtest: WithJWT needs WithAuth")
	}
	if o.auth && o.rootPassword == "" {
		t.Fatalf("etcdtest: WithAuth: the root password must not be empty")
	}
	var tlsFiles *TLSFiles
	if o.tls {
		tlsFiles = GenerateTLS(t)
	}
	if o.binary != "" {
		var err error
		if o.binaryNoFsync, err = checkBinary(o.binary); err != nil {
			t.Fatalf("etcdtest: WithBinary: %v", err)
		}
	}
	var authToken string
	if o.auth {
		authToken = "simple"
		if o.jwt {
			authToken = jwtAuthToken(t, o.tokenTTL)
		}
	}
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var c *Cluster
		c, err = start(t, o, tlsFiles, authToken)
		if err == nil {
			t.Cleanup(c.Close)
			return c
		}
		if !isAddrInUse(err) {
			break
		}
	}
	t.Fatalf("etcdtest: start %d-member cluster: %v", o.size, err)
	return nil
}

// start makes one attempt at starting a cluster. On failure everything it
// started is stopped again.
func start(t testing.TB, o options, tlsFiles *TLSFiles, authToken string) (c *Cluster, err error) {
	c = &Cluster{t: t, tls: tlsFiles, rpc: newRPCCounter(), processes: o.processes}
	if o.auth {
		c.rootPassword = o.rootPassword
	}
	defer func() {
		if err != nil {
			if cerr := c.close(); cerr != nil {
				err = fmt.Errorf("%w (and cleanup failed: %v)", err, cerr)
			}
		}
	}()

	ports, err := reservePorts(o.size)
	if err != nil {
		return c, err
	}
	token := fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), clusterSeq.Add(1))
	var peers []string
	for i, p := range ports {
		m := &Member{
			name:       "m" + strconv.Itoa(i),
			dir:        t.TempDir(),
			clientURL:  loopbackURL(p.client),
			peerURL:    loopbackURL(p.peer),
			peerFwdURL: loopbackURL(p.peerFwd),
			proxyURL:   loopbackURL(p.proxy),
			token:      token,
			logger:     o.logger,
			tls:        tlsFiles,
			rpc:        c.rpc,
			processes:  o.processes,
			binary:     o.binary,
			noFsync:    o.binaryNoFsync,
			maxTxnOps:  o.maxTxnOps,
			maxReqSize: o.maxReqSize,
		}
		if o.auth {
			m.auth, m.authToken, m.tokenTTL = true, authToken, tokenTTLSeconds(o.tokenTTL)
			m.rootPassword = o.rootPassword
		}
		m.cheapPasswords = o.auth || o.cheapHashes
		if tlsFiles != nil {
			m.clientURL.Scheme, m.proxyURL.Scheme = "https", "https"
		}
		peers = append(peers, m.name+"="+m.peerFwdURL.String())
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initialCluster = strings.Join(peers, ",")
		if err := m.startNetwork(); err != nil {
			return c, err
		}
	}

	return c, c.startMembers(time.Now().Add(startTimeout))
}

// startMembers starts every member of a new cluster, waits until each is
// ready, a leader is elected and each serves a linearizable read, and
// enables authentication WithAuth.
func (c *Cluster) startMembers(deadline time.Time) error {
	for _, m := range c.members {
		if err := m.launch("new"); err != nil {
			return fmt.Errorf("member %s: %w", m.name, err)
		}
	}
	for _, m := range c.members {
		if err := m.waitReady(deadline); err != nil {
			return fmt.Errorf("member %s: %w", m.name, err)
		}
	}
	if _, err := c.waitLeader(deadline); err != nil {
		return err
	}
	for _, m := range c.members {
		if err := m.waitServing(deadline); err != nil {
			return fmt.Errorf("member %s: %w", m.name, err)
		}
	}
	if c.rootPassword != "" {
		if err := c.enableAuth(deadline); err != nil {
			return err
		}
	}
	return nil
}

// Members returns the members in a fixed order; indexes match WaitLeader.
func (c *Cluster) Members() []*Member {
	return append([]*Member(nil), c.members...)
}

// Endpoints returns the client URLs of the members' proxies,
// "http://127.0.0.1:PORT" ("https://" WithTLS), in member order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// DirectEndpoints returns the client URLs of the members themselves,
// bypassing the proxies, in member order.
func (c *Cluster) DirectEndpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.DirectEndpoint()
	}
	return eps
}

// Client returns a client of the cluster with short timeouts suited to
// tests: 2s dial timeout, keepalive pings every 10s (gRPC's minimum) while
// requests are open with a 1s ack timeout, gRPC reconnect backoff capped at
// 500ms and a 1s connect timeout, so it reconnects quickly after an outage.
// It connects to endpoints, or to Endpoints (through the proxies) if none
// are given, with the cluster's client certificate WithTLS and as RootUser
// WithAuth (see ClientConfig). The client is closed at the end of t
// (t.Cleanup) or when the cluster is closed, whichever comes first. It
// fails the test if the client cannot be created.
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	return c.newClient(t, c.ClientConfig(endpoints...))
}

// UserClient is Client logged in as user with password instead of
// RootUser. It fails the test if the client cannot be created, which with
// a wrong password it cannot: the etcd client logs in when it is created.
func (c *Cluster) UserClient(t testing.TB, user, password string, endpoints ...string) *clientv3.Client {
	t.Helper()
	cfg := c.ClientConfig(endpoints...)
	cfg.Username, cfg.Password = user, password
	return c.newClient(t, cfg)
}

// ClientConfig returns the configuration of the clients made by Client,
// for endpoints or Endpoints if none are given: TLS with the cluster's CA
// and client certificate WithTLS, RootUser's credentials WithAuth. The
// caller may modify it and create its own client, which it must close.
func (c *Cluster) ClientConfig(endpoints ...string) clientv3.Config {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cfg := clientConfig(endpoints)
	if c.tls != nil {
		cfg.TLS = c.tls.ClientTLS()
	}
	if c.rootPassword != "" {
		cfg.Username, cfg.Password = RootUser, c.rootPassword
	}
	return cfg
}

// RPCStats returns the number of requests the members served and refused
// since Start, by method and by error. The counts are the cluster's own,
// unlike the Prometheus metrics the embedded servers share process-wide.
// It panics for a cluster of process members (WithProcesses), whose
// requests are served in other processes: empty counts would make any
// bound on them pass.
func (c *Cluster) RPCStats() RPCStats {
	if c.processes {
		panic("etcdtest: Cluster.RPCStats is not available with WithProcesses")
	}
	return c.rpc.stats()
}

// MemberByID returns the member whose etcd member ID (Member.ID) is id, as
// in the MemberId of a response header, or nil if there is none.
func (c *Cluster) MemberByID(id uint64) *Member {
	for _, m := range c.members {
		if m.ID() == id {
			return m
		}
	}
	return nil
}

// newClient creates a client with cfg, closed at the end of t or with the
// cluster.
func (c *Cluster) newClient(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: new client for %v: %v", cfg.Endpoints, err)
	}
	closeClient := sync.OnceFunc(func() { _ = cli.Close() })
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.clients = append(c.clients, closeClient)
	}
	c.mu.Unlock()
	if closed {
		closeClient()
		t.Fatalf("etcdtest: Client called on a closed cluster")
	}
	t.Cleanup(closeClient)
	return cli
}

// clientConfig is the configuration of clients made by this package.
func clientConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          clientDialTimeout,
		DialKeepAliveTime:    clientKeepAliveTime,
		DialKeepAliveTimeout: clientKeepAliveTimeout,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  clientBackoffBaseDelay,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   clientBackoffMaxDelay,
				},
				MinConnectTimeout: clientMinConnectTimeout,
			}),
		},
	}
}

// Close closes, in this order, the clients made by Client, the members and
// the proxies. It is safe to call more than once and from several
// goroutines; later calls do nothing. Each member gets 10 seconds to stop;
// failures are reported with t.Errorf on the testing.TB given to Start.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		if err := c.close(); err != nil {
			c.t.Errorf("etcdtest: close cluster: %v", err)
		}
	})
}

func (c *Cluster) close() error {
	c.mu.Lock()
	c.closed = true
	clients := c.clients
	c.clients = nil
	c.mu.Unlock()
	for _, closeClient := range clients {
		closeClient()
	}

	// Members stop in parallel and abruptly: a graceful stop of a leader
	// would try to hand leadership to a member that is stopping too.
	errs := make([]error, 2*len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { errs[i] = m.retire() })
	}
	wg.Wait()
	for i, m := range c.members {
		wg.Go(func() { errs[len(c.members)+i] = m.closeNetwork() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitLeader waits until the running members agree on a leader that is
// itself running, and returns the leader's index in Members. It fails the
// test at once if no member is running, and if there is no such leader
// within 10 seconds.
func (c *Cluster) WaitLeader(t testing.TB) int {
	t.Helper()
	i, err := c.waitLeader(time.Now().Add(leaderTimeout))
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return i
}

func (c *Cluster) waitLeader(deadline time.Time) (int, error) {
	p := &leaderProbe{clients: map[*Member]*clientv3.Client{}}
	defer p.close()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		i, running, views := c.leader(p)
		if i >= 0 {
			return i, nil
		}
		if running == 0 {
			return -1, errors.New("no leader: no member is running")
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no leader agreed on by the running members within %v (leader ID seen by each member: %s)",
				leaderTimeout, views)
		}
		<-tick.C
	}
}

// leaderProbe asks process members whom they see as leader, each through
// a client of its own.
type leaderProbe struct {
	clients map[*Member]*clientv3.Client
}

// view returns the member's ID and the leader it sees (0 if none), and
// false if it does not answer.
func (p *leaderProbe) view(m *Member) (id, lead uint64, ok bool) {
	if !m.processes {
		e := m.Etcd()
		if e == nil {
			return 0, 0, false
		}
		return uint64(e.Server.MemberID()), uint64(e.Server.Leader()), true
	}
	cli := p.clients[m]
	if cli == nil {
		var err error
		if cli, err = clientv3.New(m.directConfig()); err != nil {
			return 0, 0, false
		}
		p.clients[m] = cli
	}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	resp, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return 0, 0, false
	}
	return resp.Header.MemberId, resp.Leader, true
}

func (p *leaderProbe) close() {
	for _, cli := range p.clients {
		_ = cli.Close()
	}
}

// leader returns the index of the leader if all running members agree on
// one that is running, else -1. Frozen members count as not running. It
// also returns the number of running members and a description of what
// each member sees.
func (c *Cluster) leader(p *leaderProbe) (leader, running int, views string) {
	var lead uint64
	var desc []string
	agreed := true
	ids := map[uint64]int{}
	for i, m := range c.members {
		if !m.Running() || m.Frozen() {
			desc = append(desc, m.name+": stopped or frozen")
			continue
		}
		running++
		id, l, ok := p.view(m)
		if !ok {
			desc = append(desc, m.name+": no answer")
			agreed = false
			continue
		}
		ids[id] = i
		desc = append(desc, fmt.Sprintf("%s (%x): %x", m.name, id, l))
		if l == 0 || (lead != 0 && l != lead) {
			agreed = false
		}
		lead = l
	}
	views = strings.Join(desc, ", ")
	if running == 0 || !agreed {
		return -1, running, views
	}
	if i, ok := ids[lead]; ok {
		return i, running, views
	}
	return -1, running, views
}

// Compact compacts the key-value store at its current revision and waits
// until the compaction is physically applied. It talks to the running
// members directly, bypassing the proxies, and fails the test on error.
// Compacting a store that is already compacted at its current revision is
// not an error.
func (c *Cluster) Compact(t testing.TB) {
	t.Helper()
	var eps []string
	for _, m := range c.members {
		if m.Running() {
			eps = append(eps, m.DirectEndpoint())
		}
	}
	if len(eps) == 0 {
		t.Fatalf("etcdtest: Compact: no member is running")
	}
	cli, err := clientv3.New(c.ClientConfig(eps...))
	if err != nil {
		t.Fatalf("etcdtest: Compact: new client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, probeKey)
	if err != nil {
		t.Fatalf("etcdtest: Compact: read current revision: %v", err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("etcdtest: Compact at revision %d: %v", rev, err)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// portSet is the ports of one member.
type portSet struct{ client, peer, peerFwd, proxy int }

// reservePorts picks distinct free ports for n members, below the
// kernel's ephemeral range (proctest.Ports) so that no connection takes a
// member's port while it restarts. The member ports are free on 127.0.0.1,
// the proxy ports on all interfaces (the proxy listens on ":port"). All
// probe listeners stay open until every port is picked, so the ports are
// distinct; someone else may still take one before it is used, which
// Start handles by retrying.
func reservePorts(n int) ([]portSet, error) {
	var res proctest.Ports
	defer res.Release()
	ports := make([]portSet, n)
	for i := range ports {
		for _, pick := range []struct {
			port *int
			host string
		}{{&ports[i].client, "127.0.0.1"}, {&ports[i].peer, "127.0.0.1"}, {&ports[i].peerFwd, "127.0.0.1"}, {&ports[i].proxy, ""}} {
			p, err := res.Pick(pick.host)
			if err != nil {
				return nil, fmt.Errorf("reserve a free port: %w", err)
			}
			*pick.port = p
		}
	}
	return ports, nil
}

func loopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || (err != nil && strings.Contains(err.Error(), "address already in use"))
}
