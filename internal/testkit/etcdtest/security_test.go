package etcdtest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestTLS(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithTLS())
	f := c.TLS()
	if f == nil {
		t.Fatal("TLS() = nil for a cluster started WithTLS")
	}
	for _, ep := range append(c.Endpoints(), c.DirectEndpoints()...) {
		if !strings.HasPrefix(ep, "https://127.0.0.1:") {
			t.Fatalf("endpoint %q, want https://127.0.0.1:PORT", ep)
		}
	}
	// Through the proxy (TLS end to end: the proxy forwards bytes) and
	// directly.
	cli := c.Client(t)
	if err := put(cli, "k", "v"); err != nil {
		t.Fatalf("put through the proxy over TLS: %v", err)
	}
	if err := getValue(c.Client(t, c.DirectEndpoints()...), "k", "v"); err != nil {
		t.Fatalf("get direct over TLS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	if got := ml.Members[0].ClientURLs; len(got) != 1 || got[0] != c.Endpoints()[0] {
		t.Fatalf("advertised client URLs = %v, want [%s]", got, c.Endpoints()[0])
	}

	// A client that does not trust the CA, and one without a client
	// certificate, are refused; the error of the request itself is only
	// its deadline (the etcd client waits for a connection), but the
	// connection's error names the certificate problem.
	wrongCA := f.ClientTLS()
	wrongCA.RootCAs = etcdtest.GenerateTLS(t).ClientTLS().RootCAs
	noCert := f.ClientTLS()
	noCert.Certificates = nil
	for name, tc := range map[string]*tls.Config{"wrong CA": wrongCA, "no client certificate": noCert} {
		cfg := c.ClientConfig()
		cfg.TLS = tc
		bad, err := clientv3.New(cfg)
		if err != nil {
			t.Fatalf("%s: new client: %v", name, err)
		}
		err = put(bad, "k", "x")
		bad.Close()
		if err == nil {
			t.Fatalf("%s: put succeeded, want a refused connection", name)
		}
		t.Logf("%s: %v", name, err)
	}
	if err := getValue(cli, "k", "v"); err != nil {
		t.Fatalf("after the refused clients: %v", err)
	}
}

func TestAuth(t *testing.T) {
	const ttl = time.Second
	c := etcdtest.Start(t, etcdtest.WithAuth("secret", ttl))
	if c.TLS() != nil {
		t.Fatal("TLS() != nil without WithTLS")
	}
	cli := c.Client(t)
	if err := put(cli, "k", "v"); err != nil {
		t.Fatalf("put as root: %v", err)
	}

	// Without credentials, and with a wrong password.
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	anon, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("new client without credentials: %v", err)
	}
	defer anon.Close()
	if err := put(anon, "k", "x"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("put without credentials: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	cfg = c.ClientConfig()
	cfg.Password = "wrong"
	if bad, err := clientv3.New(cfg); !errors.Is(err, rpctypes.ErrAuthFailed) {
		if bad != nil {
			bad.Close()
		}
		t.Fatalf("new client with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}

	// A user with a role on one prefix.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "app", "app/", clientv3.GetPrefixRangeEnd("app/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "alice", "pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "alice", "app"); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("set up user: %v", err)
		}
	}
	alice := c.UserClient(t, "alice", "pw")
	if err := put(alice, "app/x", "1"); err != nil {
		t.Fatalf("put as alice in her prefix: %v", err)
	}
	if err := put(alice, "k", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put as alice outside her prefix: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}

	// The token expires when unused for the TTL; the client logs in again
	// by itself. The wait is the point: let the token expire.
	before := c.RPCStats()
	time.Sleep(ttl + 1500*time.Millisecond)
	if err := put(cli, "k", "v2"); err != nil {
		t.Fatalf("put after the token expired: %v", err)
	}
	after := c.RPCStats()
	invalid := after.Errors[rpctypes.ErrInvalidAuthToken.Error()] - before.Errors[rpctypes.ErrInvalidAuthToken.Error()]
	logins := after.Calls[etcdtest.MethodAuthenticate] - before.Calls[etcdtest.MethodAuthenticate]
	if invalid < 1 || logins < 1 {
		t.Fatalf("after the TTL: %d invalid-token errors and %d logins, want at least one of each (stats %+v)", invalid, logins, after)
	}

	// A restarted member has forgotten every token; Restart still knows
	// when it serves, and clients log in again.
	m := c.Members()[0]
	m.Stop(t)
	m.Restart(t)
	eventually(t, 10*time.Second, "get as root after restart", func() error { return getValue(cli, "k", "v2") })
	eventually(t, 10*time.Second, "put as alice after restart", func() error { return put(alice, "app/x", "2") })
}

func TestTLSWithAuth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithTLS(), etcdtest.WithAuth("secret", 0), etcdtest.WithSize(3))
	cli := c.Client(t)
	if err := put(cli, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := get(cli, "k")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if err := put(cli, "k", "v2"); err != nil {
		t.Fatalf("put: %v", err)
	}
	c.Compact(t)
	if _, err := get(cli, "k", clientv3.WithRev(resp.Header.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get at a compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	// A TLS client without credentials is taken for the user named by
	// its certificate's common name: refused while no such user exists,
	// allowed what the user's roles allow once it does.
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	byCert, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer byCert.Close()
	if err := put(byCert, "cn/k", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put as an unknown certificate user: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "cn"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "cn", "cn/", clientv3.GetPrefixRangeEnd("cn/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, etcdtest.ClientCommonName, "unused"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, etcdtest.ClientCommonName, "cn"); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("set up the certificate user: %v", err)
		}
	}
	if err := put(byCert, "cn/k", "x"); err != nil {
		t.Fatalf("put as the certificate user in its prefix: %v", err)
	}
	if err := put(byCert, "k", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put as the certificate user outside its prefix: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
}
