package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RootUser is the etcd user that WithAuth creates with the root role, and
// that clients made by Cluster.Client log in as.
const RootUser = "root"

// WithTLS makes the members serve clients over TLS only, with a CA and
// certificates generated for the cluster (Cluster.TLS), and require a
// client certificate signed by that CA. Endpoints then start with
// "https://". The proxies forward TCP, so TLS runs end to end between the
// client and the member. Raft traffic between members stays plain.
func WithTLS() Option {
	return func(o *options) { o.tls = true }
}

// WithAuth enables etcd authentication once the cluster is up: it creates
// the user RootUser with rootPassword and the root role, then enables
// auth. Clients made by Cluster.Client log in as RootUser;
// Cluster.UserClient logs in as another user.
//
// Tokens are etcd's "simple" tokens: a token expires tokenTTL after the
// last request that used it (etcd checks every second, so it lasts up to a
// second longer), and the client then gets "invalid auth token" and logs
// in again. tokenTTL is rounded up to whole seconds; a non-positive value
// keeps etcd's default of 300s. Passwords are hashed with bcrypt's minimum
// cost, so logging in costs the server about a millisecond instead of
// tens. Start fails the test if rootPassword is empty.
func WithAuth(rootPassword string, tokenTTL time.Duration) Option {
	return func(o *options) {
		o.auth = true
		o.rootPassword = rootPassword
		o.tokenTTL = tokenTTL
	}
}

// WithCheapPasswords makes the members hash passwords as WithAuth does,
// at bcrypt's minimum cost, for a test that creates its users and enables
// authentication itself (as an etcdctl recipe does) on a cluster started
// without WithAuth. Clients made by Client then present no credentials:
// log in with UserClient (RootUser included).
func WithCheapPasswords() Option {
	return func(o *options) { o.cheapHashes = true }
}

// tokenTTLSeconds converts WithAuth's TTL to etcd's setting: 0 for the
// default, else whole seconds rounded up.
func tokenTTLSeconds(d time.Duration) uint {
	if d <= 0 {
		return 0
	}
	return uint((d + time.Second - 1) / time.Second)
}

// bcryptCost is the cost of password hashes on members with auth or
// WithCheapPasswords: bcrypt's minimum (golang.org/x/crypto/bcrypt.MinCost).
// etcd's default, 10, makes each login cost the server tens of
// milliseconds of CPU, far more under the race detector.
const bcryptCost = 4

// TLS returns the cluster's certificates, or nil if it was not started
// WithTLS.
func (c *Cluster) TLS() *TLSFiles { return c.tls }

// enableAuth creates the root user and role and enables authentication,
// talking to the members directly.
func (c *Cluster) enableAuth(deadline time.Time) error {
	cfg := clientConfig(c.DirectEndpoints())
	if c.tls != nil {
		cfg.TLS = c.tls.ClientTLS()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("enable auth: new client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := cli.RoleAdd(ctx, RootUser); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("enable auth: add role %s: %w", RootUser, err)
	}
	if _, err := cli.UserAdd(ctx, RootUser, c.rootPassword); err != nil {
		return fmt.Errorf("enable auth: add user %s: %w", RootUser, err)
	}
	if _, err := cli.UserGrantRole(ctx, RootUser, RootUser); err != nil {
		return fmt.Errorf("enable auth: grant role %s: %w", RootUser, err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable auth: %w", err)
	}
	return nil
}
