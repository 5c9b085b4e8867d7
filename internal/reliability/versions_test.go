package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// The etcd version matrix (DESIGN section 9: the etcd people run is part of
// the fault model). For each etcd server (the embedded one, run as child
// processes, and each binary of etcdtest.BinariesEnv: .ci/run gives Debian's
// 3.4 and 3.5 and 3.6 built from the Go module proxy) and each way of
// proving an identity (a password with simple tokens, a password with
// JWTs, a client certificate), a 3-member cluster goes through three
// faults: a follower killed and restarted, the leader killed, and quorum
// lost for longer than the lease TTL after every token has outlived
// etcd's --auth-token-ttl. After each, from the moment etcd answers again,
// within recoverBound: a client made from etcd.ClientConfig answers a
// read, the registrar registers a new instance (and, after the quorum
// loss, has its first one back), and a Discovery's watcher sees it. The
// client's requests that reach etcd stay under maxRequestRate a second
// from the fault to its recovery (over 2 s at least).
//
// Without etcd.ClientConfig's dropRefusedToken, every password cell of
// etcd 3.4 fails: the client's requests end "context deadline exceeded"
// for as long as it runs, and it sends its dead token about every 50 ms.
const (
	// authTokenTTL is etcd's --auth-token-ttl (simple tokens) and the JWT
	// lifetime in the matrix: short, so that every idle gap outlives it.
	authTokenTTL = 2 * time.Second
	// recoverBound is how soon after etcd answers every process must be
	// served again: the registrar's backoff is at most 500 ms and its
	// requests time out after 1 s (opts), a fresh login costs two round
	// trips; the rest is room for a loaded 2-core machine under -race.
	recoverBound = 10 * time.Second
	// maxRequestRate bounds the requests a second the client sends etcd
	// while a fault lasts: it asks once every 250 ms (4 a second), and a
	// forgotten token costs two more requests once.
	maxRequestRate = 10.0
)

// authMode is a way a Muster process proves its identity to etcd.
type authMode struct {
	name     string
	cluster  []etcdtest.Option
	password bool // log in with a user name and password; else the client certificate's name
}

var authModes = []authMode{
	{name: "password-simple", password: true},
	{name: "password-jwt", password: true, cluster: []etcdtest.Option{etcdtest.WithJWT()}},
	{name: "client-cert", cluster: []etcdtest.Option{etcdtest.WithTLS()}},
}

// etcdServer is an etcd server of the matrix.
type etcdServer struct {
	version string
	opt     etcdtest.Option
}

// etcdServers returns the servers of the matrix: the embedded etcd and the
// binaries of etcdtest.BinariesEnv. Under CI=true, the versions .ci/run
// installs must all be there.
func etcdServers(t *testing.T) []etcdServer {
	out := []etcdServer{{version: "embedded", opt: etcdtest.WithProcesses()}}
	minors := map[string]bool{}
	for _, path := range etcdtest.Binaries() {
		v, err := etcdtest.BinaryVersion(path)
		if err != nil {
			t.Fatalf("%s: %v", etcdtest.BinariesEnv, err)
		}
		out = append(out, etcdServer{version: v, opt: etcdtest.WithBinary(path)})
		minors[v[:3]] = true
	}
	for _, want := range []string{"3.4", "3.5", "3.6"} {
		if !minors[want] {
			if os.Getenv("CI") == "true" {
				t.Fatalf("no etcd %s in %s (.ci/run installs it)", want, etcdtest.BinariesEnv)
			}
			t.Logf("no etcd %s in %s: its cells do not run (.ci/run installs it)", want, etcdtest.BinariesEnv)
		}
	}
	return out
}

func TestEtcdVersionsRecover(t *testing.T) {
	for _, srv := range etcdServers(t) {
		for _, mode := range authModes {
			t.Run(srv.version+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				runVersionCell(t, srv, mode)
			})
		}
	}
}

// cell is one server and auth mode of the matrix, running.
type cell struct {
	c    *etcdtest.Cluster
	root *clientv3.Client
	mode authMode
	// plain is a client as a user builds it from etcd.ClientConfig; sent
	// counts its requests that reached etcd.
	plain *clientv3.Client
	sent  atomic.Int64
	log   syncbuf.Buffer // plain's etcd.ClientLogger
	reg   *etcd.Registrar
	wt    registry.Watcher
}

func runVersionCell(t *testing.T, srv etcdServer, mode authMode) {
	copts := append([]etcdtest.Option{etcdtest.WithSize(3), etcdtest.WithAuth("root-pw", authTokenTTL), srv.opt}, mode.cluster...)
	c := &cell{c: etcdtest.Start(t, copts...), mode: mode}
	c.root = c.c.Client(t)
	c.grantService(t)
	c.plain = c.client(t, &c.sent, &c.log)
	var err error
	if c.reg, err = etcd.NewRegistrar(c.client(t, nil, nil), regOpts()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.reg.Close() })
	d, err := etcd.NewDiscovery(c.client(t, nil, nil), discOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.reg.Register(ctx, inst("a")); err != nil {
		t.Fatalf("register a: %v", err)
	}
	if c.wt, err = d.Watch(context.Background(), "greeter"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.wt.Close() })
	registrytest.WaitFor(t, c.wt, "a", registrytest.HasIDs("a"))

	// A follower killed and restarted: it forgets every simple token.
	ms := c.c.Members()
	leader := c.c.WaitLeader(t)
	follower := ms[(leader+1)%len(ms)]
	c.fault(t, "follower restarted", []string{"a"}, func() {
		follower.Kill(t)
		follower.Restart(t)
	})

	// The leader killed: the others elect a new one.
	leader = c.c.WaitLeader(t)
	c.fault(t, "leader killed", []string{"a", "b"}, func() {
		ms[leader].Kill(t)
		c.c.WaitLeader(t)
	})
	ms[leader].Restart(t)

	// Quorum lost for longer than the lease TTL, after every token has
	// outlived its TTL (etcd checks simple tokens every second).
	time.Sleep(authTokenTTL + 1500*time.Millisecond) // the idle gap is the fault's precondition
	leader = c.c.WaitLeader(t)
	lost := []*etcdtest.Member{ms[leader], ms[(leader+1)%len(ms)]}
	c.fault(t, "quorum lost", []string{"a", "b", "c"}, func() {
		for _, m := range lost {
			m.Kill(t)
		}
		time.Sleep(ttl + time.Second) // the outage's length is the fault
		for _, m := range lost {
			m.Restart(t)
		}
	})

	// What the log says when etcd 3.4 refused a login for its token.
	const refused = `refused the token of user \"svc\" (etcdserver: invalid auth token); logging in again without it`
	if strings.HasPrefix(srv.version, "3.4.") && mode.password && !strings.Contains(c.log.String(), refused) {
		t.Errorf("the client's log does not say %q:\n%s", refused, c.log.String())
	}
}

// grantService creates the role of a service's processes (read and write
// on the whole prefix: instances, settings, journal) and gives it to the
// user the cell's clients are: "svc" with a password, or the name of the
// client certificate.
func (c *cell) grantService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	user := "svc"
	if !c.mode.password {
		user = etcdtest.ClientCommonName
	}
	prefix := registry.DefaultPrefix
	steps := []func() error{
		func() error { _, err := c.root.RoleAdd(ctx, "svc"); return err },
		func() error {
			_, err := c.root.RoleGrantPermission(ctx, "svc", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.root.UserAdd(ctx, user, "svc-pw"); return err },
		func() error { _, err := c.root.UserGrantRole(ctx, user, "svc"); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("grant the service role: %v", err)
		}
	}
}

// client returns a client of the service's user built as the docs say,
// from etcd.ClientConfig; sent, if not nil, counts its requests that
// reached etcd, and log, if not nil, gets its log (etcd.ClientLogger).
func (c *cell) client(t *testing.T, sent *atomic.Int64, log *syncbuf.Buffer) *clientv3.Client {
	cfg := etcd.ClientConfig(c.c.Endpoints()...)
	if log != nil {
		cfg.Logger = etcd.ClientLogger(slog.New(slog.NewTextHandler(log, nil)))
	}
	if c.mode.password {
		cfg.Username, cfg.Password = "svc", "svc-pw"
	}
	if tls := c.c.TLS(); tls != nil {
		cfg.TLS = tls.ClientTLS()
	}
	if sent != nil {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				var p peer.Peer
				err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
				if p.Addr != nil {
					sent.Add(1)
				}
				return err
			}))
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("client of the service's user: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// fault runs inject while the plain client keeps asking, then checks that
// within recoverBound of inject's return (etcd answers) the plain client
// answers, the registrar registers a new instance and the watcher sees the
// instances want plus the new one.
func (c *cell) fault(t *testing.T, name string, want []string, inject func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan time.Time, 1) // the end of the first read after etcd answered
	var answered atomic.Pointer[time.Time]
	before := c.sent.Load()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := c.plain.Get(rctx, registry.ServicePrefix(registry.DefaultPrefix, "greeter"), clientv3.WithPrefix())
			cancel()
			if err == nil && answered.Load() != nil {
				served <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		stop()
		<-done
	}()
	inject()
	at := time.Now()
	answered.Store(&at)

	// Over 2 s at least: a fault that heals at once leaves too short a
	// window for a rate.
	rateSoFar := func() float64 {
		return float64(c.sent.Load()-before) / max(time.Since(start), 2*time.Second).Seconds()
	}
	var plainAt time.Time
	select {
	case plainAt = <-served:
	case <-time.After(recoverBound):
		t.Fatalf("%s: a client from etcd.ClientConfig did not answer within %v after etcd did (%.1f requests/s sent to etcd)",
			name, recoverBound, rateSoFar())
	}
	rate := rateSoFar()

	id := fmt.Sprint(string(rune('a' + len(want))))
	rctx, cancel := context.WithTimeout(context.Background(), recoverBound)
	defer cancel()
	if err := c.reg.Register(rctx, inst(id)); err != nil && !errors.Is(err, registry.ErrPending) {
		t.Fatalf("%s: register %s: %v", name, id, err)
	}
	all := append(append([]string(nil), want...), id)
	registrytest.WaitForWithin(t, c.wt, recoverBound-time.Since(at), name+": "+fmt.Sprint(all)+" seen", registrytest.HasIDs(all...))
	seen := time.Since(at)
	t.Logf("%s: client answered %s after etcd, registration %s seen after %s; %.1f requests/s sent to etcd during the fault",
		name, fmtDur(plainAt.Sub(at)), id, fmtDur(seen), rate)
	if rate > maxRequestRate {
		t.Errorf("%s: the client sent etcd %.1f requests a second during the fault; want at most %.0f", name, rate, maxRequestRate)
	}
}
