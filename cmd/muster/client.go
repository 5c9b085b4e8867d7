package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/osuser"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/zookeeper"
)

// reportGrace is how much longer than --timeout a command waits for its
// etcd requests, each bounded by --timeout, so that a request that failed
// can report why (such as a TLS handshake failure) rather than only that
// the time ran out.
const reportGrace = 250 * time.Millisecond

// errInterrupted is returned by a command stopped by SIGINT or SIGTERM
// before it finished.
var errInterrupted = errors.New("interrupted")

// session is one command's connection to the registry: the Store the
// flags name (etcd at --endpoints, or ZooKeeper with --registry zk://...),
// whose Discovery the command reads and whose Admin it changes the
// registry through; or, over several clusters (connectClusters), a
// Discovery of them and no Store.
type session struct {
	g *globalOptions
	// store is the registry; nil over several clusters.
	store registry.Store
	// admin is store's Admin, its writes recorded as the command's.
	admin registry.Admin
	// cli is the etcd Store's client, through which the legacy layouts
	// are read beside Muster's (mergeLegacy); nil on ZooKeeper and over
	// several clusters.
	cli *clientv3.Client
	// opts are the options of the etcd Store's Discovery, which the
	// session's other Discoveries take too (mergeLegacy).
	opts []etcd.DiscoveryOption
	// servers are the ZooKeeper servers of --registry; nil on etcd.
	servers []string
	// view is the Discovery the session reads services through: the
	// store's, or that merged with legacy sources (mergeLegacy).
	view lister
	// merged is true when view merges legacy sources.
	merged bool
	// closers close what mergeLegacy opened, in reverse order.
	closers []func() error
}

// lister is a Discovery that lists its services.
type lister interface {
	registry.Discovery
	registry.ServiceLister
}

// storeOptions are what a command adds to the Store the flags name.
type storeOptions struct {
	// discovery are added to the etcd Store's options and to those of
	// the session's other Discoveries (a layout, a progress interval).
	discovery []etcd.DiscoveryOption
	// etcd are added to the etcd Store's options only (a Registrar's TTL,
	// a logger).
	etcd []etcd.StoreOption
	// zk are added to the ZooKeeper Store's options.
	zk []zookeeper.Option
	// clientLog receives the etcd client's own warnings and errors
	// (etcd.ClientLogger); nil: none, as the short commands want.
	clientLog *slog.Logger
}

// connect creates the session over the Store the flags name. parent is
// the command's context; opts are added to the etcd Store's Discovery's
// options.
func (g *globalOptions) connect(parent context.Context, stderr io.Writer, opts ...etcd.DiscoveryOption) (*session, error) {
	return g.open(parent, stderr, storeOptions{discovery: opts})
}

// open creates the session: the one place where the command's Store is
// made. With --registry zk://... it is ZooKeeper's, which connects in the
// background. Else it is etcd's at --endpoints, with TLS (--cacert, --cert,
// --key) and credentials (--user, --password) from the flags: without
// credentials it does not contact etcd; with them, the client logs in at
// once and open fails if etcd does not answer within --timeout or refuses
// the login. Either Store logs only errors (such as skipped bad values) on
// stderr.
func (g *globalOptions) open(parent context.Context, stderr io.Writer, o storeOptions) (*session, error) {
	log := g.log.logger(stderr, slog.LevelError)
	servers, err := g.zkServers()
	if err != nil {
		return nil, err
	}
	s := &session{g: g, servers: servers}
	if servers != nil {
		st, err := zookeeper.Open(servers, append([]zookeeper.Option{zookeeper.WithRoot(g.prefix),
			zookeeper.WithRequestTimeout(g.timeout), zookeeper.WithLogger(log)}, o.zk...)...)
		if err != nil {
			return nil, err
		}
		return s.use(st)
	}
	cfg, err := g.clientConfig()
	if err != nil {
		return nil, err
	}
	cfg.Logger = etcd.ClientLogger(o.clientLog)
	cli, err := clientv3.New(cfg)
	if err != nil {
		if cfg.Username != "" {
			return nil, g.etcdError(parent, "log in to etcd as "+cfg.Username, err)
		}
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(g.endpoints, ","), err)
	}
	s.opts = append([]etcd.DiscoveryOption{
		etcd.WithPrefix(g.prefix),
		etcd.WithRequestTimeout(g.timeout),
		etcd.WithLogger(log),
	}, o.discovery...)
	opts := make([]etcd.StoreOption, 0, len(s.opts)+len(o.etcd))
	for _, opt := range s.opts {
		opts = append(opts, opt)
	}
	st, err := etcd.NewStore(cli, append(opts, o.etcd...)...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.cli = cli
	return s.use(st)
}

// use makes st the session's Store.
func (s *session) use(st registry.Store) (*session, error) {
	s.store = st
	s.admin = st.Admin(registry.Actor{Who: s.g.who(), Source: registry.SourceCommand})
	view, ok := st.Discovery().(lister)
	if !ok {
		s.Close()
		return nil, fmt.Errorf("%s: its Discovery does not list services", s.where())
	}
	s.view = view
	return s, nil
}

// who is who the command's writes are recorded as made by: the etcd user
// (--user), else the local user.
func (g *globalOptions) who() string {
	name := g.user
	if name == "" {
		name = osuser.Name()
	}
	return osuser.Clean(name)
}

// where names the registry, for messages: "etcd at ENDPOINTS" or
// "ZooKeeper at SERVERS".
func (s *session) where() string {
	if s.servers != nil {
		return "ZooKeeper at " + strings.Join(s.servers, ",")
	}
	return "etcd at " + strings.Join(s.g.endpoints, ",")
}

// fail turns the error of a request that ran under a context with the
// --timeout deadline, child of parent, into the error the command
// reports, naming what failed and, where the registry did not answer,
// where it is.
func (s *session) fail(parent context.Context, what string, err error) error {
	if s.servers == nil {
		return s.g.etcdError(parent, what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %s did not answer within --timeout %v: %w", what, s.where(), s.g.timeout, err)
	}
	return fmt.Errorf("%s (%s): %w", what, s.where(), err)
}

// clientConfig is the etcd client configuration the flags ask for.
// DialTimeout bounds the login that clientv3.New does with credentials.
func (g *globalOptions) clientConfig() (clientv3.Config, error) {
	cfg := etcd.ClientConfig(g.endpoints...)
	cfg.DialTimeout = g.timeout
	tlsConfig, err := g.tlsConfig()
	if err != nil {
		return cfg, err
	}
	cfg.TLS = tlsConfig
	cfg.Username, cfg.Password = g.user, g.password
	if g.passwordFile != "" {
		login, err := g.passwordFromFile()
		if err != nil {
			return cfg, err
		}
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(login))
	}
	return cfg, nil
}

// Close closes what mergeLegacy opened, then the Store, then the etcd
// client.
func (s *session) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
	if s.store != nil { // nil for a session over several clusters
		_ = s.store.Close()
	}
	if s.cli != nil {
		_ = s.cli.Close()
	}
}

// unreachableError says that etcd did not answer.
type unreachableError struct {
	endpoints []string
	err       error
	hint      string // what to check, if anything
}

func (e *unreachableError) Error() string {
	msg := fmt.Sprintf("cannot reach etcd at %s: %v", strings.Join(e.endpoints, ","), e.err)
	if e.hint != "" {
		msg += " (" + e.hint + ")"
	}
	return msg
}

func (e *unreachableError) Unwrap() error { return e.err }

// etcdError turns the error of a request that ran under a context with the
// --timeout deadline, child of parent, into the error the command reports.
func (g *globalOptions) etcdError(parent context.Context, what string, err error) error {
	if parent.Err() != nil {
		return errInterrupted
	}
	if !unanswered(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	hint := ""
	if slices.Equal(g.endpoints, []string{defaultEndpoint}) {
		hint = "is \"muster serve\" running?"
	}
	if isTimeout(err) {
		var ce *etcd.ConnectionError
		if errors.As(err, &ce) {
			// Why no connection could be made: refused, or a TLS
			// problem such as a certificate from another CA.
			err = fmt.Errorf("no answer within %v; last connection error: %s", g.timeout, ce.Cause)
			if h := g.tlsHint(ce.Cause); h != "" {
				hint = h
			} else if h := connectionHint(ce.Cause); h != "" {
				hint = h
			}
		} else {
			err = fmt.Errorf("no answer within %v", g.timeout)
		}
	}
	return &unreachableError{endpoints: g.endpoints, err: err, hint: hint}
}

// tlsHint returns what to check after a connection failure described by
// cause, when it looks like a TLS problem, or "".
func (g *globalOptions) tlsHint(cause string) string {
	https := slices.ContainsFunc(g.endpoints, func(ep string) bool { return strings.HasPrefix(ep, "https://") })
	switch {
	case strings.Contains(cause, "x509:"):
		return "check --cacert: it must be the CA that signed etcd's certificate, which must name the endpoint's host"
	case strings.Contains(cause, "certificate required"), strings.Contains(cause, "bad certificate"),
		strings.Contains(cause, "unknown certificate authority"):
		return "etcd did not accept the client certificate: check --cert and --key"
	case https && g.cert == "" && (strings.Contains(cause, "broken pipe") || strings.Contains(cause, "connection reset")):
		// With TLS 1.3 the server refuses a missing client certificate
		// after the client's handshake is done; the client may see the
		// connection closed before it reads the server's alert.
		return "etcd closed the connection after the TLS handshake: does it require a client certificate (--cert and --key)?"
	case strings.Contains(cause, "handshake failed: EOF"):
		return "the TLS handshake was cut off: does etcd serve TLS there?"
	case !https && (strings.Contains(cause, "server preface: EOF") || strings.Contains(cause, "server preface: connection reset")):
		// A TLS server drops a connection that opens with HTTP/2's
		// plaintext preface: closed (EOF) or reset, by timing.
		return "etcd closed the connection at once: if it serves TLS, use an https:// endpoint"
	}
	return ""
}

// waitLoaded waits until w's snapshot is loaded or ctx ends. It returns
// at once with the snapshot's error when etcd refused the read for good
// (permission, authentication) or when a read ended without a connection
// to etcd (the error says why). When ctx ends, the error is the
// snapshot's last error if that is an answer from etcd or says why there
// was no connection, else ctx's error: a Get that timed out or was slow
// says no more than that etcd did not answer.
func waitLoaded(ctx context.Context, w registry.Watcher) (registry.Snapshot, error) {
	for {
		s := w.Snapshot()
		if s.Loaded {
			return s, nil
		}
		if refused(s.Err) || noConnection(s.Err) {
			return s, s.Err
		}
		select {
		case _, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return s, err
				}
				return s, registry.ErrClosed
			}
		case <-ctx.Done():
			s = w.Snapshot()
			if s.Loaded {
				return s, nil
			}
			var answer rpctypes.EtcdError
			if errors.As(s.Err, &answer) || noConnection(s.Err) {
				return s, s.Err
			}
			return s, ctx.Err()
		}
	}
}

// refused reports whether err is etcd refusing a request for reasons
// that retrying does not fix: permissions or authentication.
func refused(err error) bool {
	var answer rpctypes.EtcdError
	if !errors.As(err, &answer) {
		return false
	}
	switch answer.Code() {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument:
		return true
	}
	return false
}

// noConnection reports whether err is a request that waited for a
// connection to etcd until its deadline.
func noConnection(err error) bool {
	var ce *etcd.ConnectionError
	return errors.As(err, &ce)
}

// unanswered reports whether err says that etcd did not answer: a deadline
// expired (waiting for a connection, or for the answer), or no connection
// was available.
func unanswered(err error) bool {
	return isTimeout(err) || status.Code(err) == codes.Unavailable
}

// isTimeout reports whether err is a deadline expiring, as a context error
// or as the gRPC status the etcd client may turn it into.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}
