// Package embedetcd runs a single-node etcd server inside the process, as
// Muster's built-in registry (muster serve, muster demo) and the runnable
// examples' etcd.
//
// Start returns once the server serves clients; Close stops it. Close does
// not wait for long-lived client streams (watches, lease keep-alives) to
// end on their own: it ends them at once with codes.Unavailable, which etcd
// clients treat like a lost connection, so a stop does not wait etcd's
// request timeout for each open stream.
//
// # Concurrency
//
// A Server's methods are safe for concurrent use.
package embedetcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Defaults used for the zero values of Config's fields.
const (
	// DefaultName is the etcd member name.
	DefaultName = "muster"
	// DefaultClientURL is where the server listens for clients.
	DefaultClientURL = "http://127.0.0.1:2379"
	// DefaultPeerURL is where the server listens for raft peers. A single
	// node has none, but etcd needs the URL to name itself.
	DefaultPeerURL = "http://127.0.0.1:2380"
	// DefaultReadyTimeout bounds how long Start waits for the server.
	DefaultReadyTimeout = time.Minute
	// DefaultStopTimeout bounds how long Close waits for the server.
	DefaultStopTimeout = 10 * time.Second

	// compactionRetention keeps an hour of key history: enough for any
	// watcher to resume after a reconnect, bounded so that a registry
	// running for months does not grow without limit.
	compactionRetention = "1h"
	clusterToken        = "muster"
)

// MaxRequestBytes is the largest request the server accepts (etcd's
// --max-request-bytes, 1.5 MiB by default): 512 KiB. A larger write is
// refused with "etcdserver: request is too large" (rpctypes.ErrRequestTooLarge),
// or by gRPC past 1 MiB (the limit and etcd's 512 KiB allowance for gRPC
// framing), so one write of a service's user cannot take more of the
// backend quota than that.
//
// The largest value Muster's validation lets through is an instance at
// every limit of registry.Validate (64 metadata entries of 128-byte keys and
// 512-byte values, 128-byte ID, version, zone and region, a 253-byte host),
// each byte one that JSON writes as a six-byte escape (\u0001, \u003c):
// 249,709 bytes. The largest request Muster makes is about that value plus
// keys: the operator's deregistration of such an instance, whose journal
// record carries the value (252,339 bytes with a 256-byte who), or a
// Registrar's put of it with one copy in another layout (etcd.WithMirror:
// Kratos's 248,111 bytes). 512 KiB leaves twice the largest value, for an
// instance with one copy and for fields a later minor version adds; typical
// values are under 1 KiB. An instance at every limit with two copies that
// carry its metadata (Kratos and etcd naming, 744 KB) is refused, as is a
// policy whose retry codes repeat tens of thousands of times.
const MaxRequestBytes = 512 << 10

// DefaultQuotaBackendBytes is etcd's backend quota, used when
// Config.QuotaBackendBytes is 0.
const DefaultQuotaBackendBytes = 2 << 30

// ErrAddrInUse is matched by the error Start returns when the client or
// peer address is already taken by another process.
var ErrAddrInUse = errors.New("embedetcd: address already in use")

// ErrDataDir is matched by the error Start returns when the data directory
// cannot be created or written, or is in use by another running server.
var ErrDataDir = errors.New("embedetcd: data directory not usable")

// Config configures Start. Only Dir is required.
type Config struct {
	// Dir is the data directory. It is created (mode 0700) if missing.
	// Reusing it on a later Start keeps the data. Required.
	Dir string
	// Name is the etcd member name; DefaultName when empty. Keep it the
	// same for the life of a data directory.
	Name string
	// ClientURL is the http:// URL the server listens on for clients;
	// DefaultClientURL when empty. The host must be an IP address or
	// "localhost".
	ClientURL string
	// PeerURL is the http:// URL the server listens on for raft peers;
	// DefaultPeerURL when empty.
	PeerURL string
	// ClientTLS, when not nil, serves clients over TLS: ClientURL must
	// then be an https:// URL (and without it, an http:// one).
	ClientTLS *TLS
	// PeerTLS, when not nil, serves peers over TLS, as ClientTLS does
	// clients; PeerURL must then be an https:// URL.
	PeerTLS *TLS
	// RootPassword, when not empty, keeps etcd authentication on: if
	// it is off, Start creates the user root with this password (or
	// sets it, if root exists), grants it the role root and turns
	// authentication on; if it is on, Start checks the password. When
	// empty and the data directory's etcd has authentication on, Start
	// fails: the caller could not use the registry. Errors match
	// ErrAuth.
	RootPassword string
	// Logger receives etcd's own logs. Nil discards them; see
	// ErrorLogger for a quiet logger on a writer.
	Logger *zap.Logger
	// ReadyTimeout bounds Start; DefaultReadyTimeout when <= 0.
	ReadyTimeout time.Duration
	// StopTimeout bounds Close; DefaultStopTimeout when <= 0.
	StopTimeout time.Duration
	// QuotaBackendBytes is the most the backend database may hold (etcd's
	// --quota-backend-bytes): a write that would take it past raises the
	// alarm NOSPACE (see Server.Alarms), after which etcd refuses every
	// write and lease grant until an operator frees space and disarms the
	// alarm. 0 means DefaultQuotaBackendBytes; negative is an error (etcd
	// would then have no quota, and a full disk stops it instead).
	QuotaBackendBytes int64
}

// ErrorLogger returns a zap logger that writes only errors, in etcd's
// console format, to w. It is what a command line tool passes as
// Config.Logger to keep etcd quiet but not silent.
func ErrorLogger(w io.Writer) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), zapcore.ErrorLevel)
	return zap.New(core)
}

// ErrAuth is matched by the error Start returns when the data directory's
// etcd has authentication on and Config.RootPassword is empty or not root's
// password.
var ErrAuth = errors.New("embedetcd: authentication")

// RootUser is the etcd user that Config.RootPassword is the password of.
const RootUser = "root"

// Server is a running embedded etcd server.
type Server struct {
	lock        *fileutil.LockedFile // held until the server has stopped
	etcd        *embed.Etcd
	abort       context.CancelFunc // ends the RPCs in flight
	stopping    *atomic.Bool       // set by Close; quiets the logs of the stop
	endpoint    string
	clientTLS   *TLS
	stopTimeout time.Duration

	closing chan struct{} // closed when Close starts
	exited  chan struct{} // closed when the monitor goroutine returns
	done    chan struct{} // closed when the server stopped, for any reason

	mu  sync.Mutex
	err error // why the server stopped on its own; guarded by mu

	closeOnce sync.Once
	closeErr  error
}

// Start starts an etcd server as cfg says and waits until it serves
// clients, ctx ends or cfg.ReadyTimeout passes. It first locks the data
// directory (file muster.lock in it), so a second server on the same
// directory fails at once instead of blocking on etcd's own file locks.
// On failure nothing is left running and the lock is released; the error
// matches ErrAddrInUse or ErrDataDir when those are the cause.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ec, stopping, err := embedConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := lockDataDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	abortCtx, abort := context.WithCancel(context.Background())
	ec.GRPCAdditionalServerOptions = AbortOptions(abortCtx)

	e, err := embed.StartEtcd(ec)
	if err != nil {
		abort()
		lock.Close()
		return nil, classify(err)
	}
	s := &Server{
		lock:        lock,
		etcd:        e,
		abort:       abort,
		stopping:    stopping,
		endpoint:    ec.AdvertiseClientUrls[0].String(),
		clientTLS:   cfg.ClientTLS,
		stopTimeout: orDefault(cfg.StopTimeout, DefaultStopTimeout),
		closing:     make(chan struct{}),
		exited:      make(chan struct{}),
		done:        make(chan struct{}),
	}
	go s.monitor()

	timeout := orDefault(cfg.ReadyTimeout, DefaultReadyTimeout)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		if err = s.keepAuth(ctx, cfg.RootPassword); err == nil {
			return s, nil
		}
	case <-s.done:
		err = fmt.Errorf("embedetcd: server stopped before it was ready: %w", s.Err())
	case <-ctx.Done():
		err = fmt.Errorf("embedetcd: waiting for the server to be ready: %w", ctx.Err())
	case <-timer.C:
		err = fmt.Errorf("embedetcd: server not ready within %v (is the data directory from a multi-member cluster?)", timeout)
	}
	if cerr := s.Close(); cerr != nil {
		err = fmt.Errorf("%w (and stopping it failed: %v)", err, cerr)
	}
	return nil, err
}

// Endpoint returns the URL clients use, such as "http://127.0.0.1:2379".
func (s *Server) Endpoint() string { return s.endpoint }

// ClientTLS returns the TLS configuration for clients in this process to
// reach Endpoint, or nil when the server serves clients in plain text. See
// SelfTLS.
func (s *Server) ClientTLS() *tls.Config {
	if s.clientTLS == nil {
		return nil
	}
	return s.clientTLS.SelfTLS()
}

// Done returns a channel closed when the server has stopped: after Close,
// or on its own after a fatal error (see Err).
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why the server stopped on its own, or nil while it runs and
// after a stop by Close.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Alarms returns the names of the alarms raised on the server, sorted:
// "NOSPACE" when the backend reached its quota (Config.QuotaBackendBytes),
// "CORRUPT" when the data failed a consistency check. An alarm stays
// raised, across restarts, until disarmed (etcdctl alarm disarm). Alarms
// reads the server's memory, not its disk nor the network, so it may be
// called often.
func (s *Server) Alarms() []string {
	var names []string
	for _, m := range s.etcd.Server.Alarms() {
		if name := m.Alarm.String(); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Close ends every client request and stream in flight, stops the server,
// waits until it has stopped (at most the configured stop timeout) and
// releases the data directory. It is idempotent; later calls return the
// first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.stopping.Store(true)
		s.abort()
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			s.etcd.Close()
		}()
		timer := time.NewTimer(s.stopTimeout)
		defer timer.Stop()
		select {
		case <-stopped:
			<-s.exited
			s.lock.Close()
		case <-timer.C:
			// The lock stays held: the server may still write.
			s.closeErr = fmt.Errorf("embedetcd: server did not stop within %v", s.stopTimeout)
		}
	})
	return s.closeErr
}

// monitor records a fatal error of the server and closes done when the
// server stops.
func (s *Server) monitor() {
	defer close(s.exited)
	defer close(s.done)
	var err error
	select {
	case <-s.closing:
		return
	case e, ok := <-s.etcd.Err():
		err = e
		if !ok || err == nil {
			err = errors.New("etcd server stopped")
		}
	case <-s.etcd.Server.StopNotify():
		err = errors.New("etcd server stopped")
	}
	select {
	case <-s.closing:
		// Close stopped it; not a failure.
		return
	default:
	}
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// embedConfig validates cfg and turns it into etcd's configuration.
func embedConfig(cfg Config) (*embed.Config, *atomic.Bool, error) {
	if cfg.Dir == "" {
		return nil, nil, errors.New("embedetcd: Config.Dir is required")
	}
	if cfg.QuotaBackendBytes < 0 {
		return nil, nil, fmt.Errorf("embedetcd: Config.QuotaBackendBytes %d: want 0 (etcd's default, 2 GiB) or more", cfg.QuotaBackendBytes)
	}
	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	clientURL, err := parseURL("client", cfg.ClientURL, DefaultClientURL, cfg.ClientTLS)
	if err != nil {
		return nil, nil, err
	}
	peerURL, err := parseURL("peer", cfg.PeerURL, DefaultPeerURL, cfg.PeerTLS)
	if err != nil {
		return nil, nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	stopping := new(atomic.Bool)
	lg = lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &quietStopCore{Core: c, stopping: stopping}
	}))

	ec := embed.NewConfig()
	ec.Name = name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{advertised(*clientURL)}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{advertised(*peerURL)}
	ec.InitialCluster = name + "=" + ec.AdvertisePeerUrls[0].String()
	ec.InitialClusterToken = clusterToken
	ec.ClusterState = embed.ClusterStateFlagNew // ignored once Dir holds data
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = compactionRetention
	ec.MaxRequestBytes = MaxRequestBytes
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.EnableGRPCGateway = false
	ec.Logger = "zap"
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	if cfg.ClientTLS != nil {
		ec.ClientTLSInfo = cfg.ClientTLS.info()
	}
	if cfg.PeerTLS != nil {
		ec.PeerTLSInfo = cfg.PeerTLS.info()
	}
	return ec, stopping, nil
}

// quietStopCore drops the errors etcd logs about its own listeners closing
// while it is being stopped: they are the expected result of the stop.
type quietStopCore struct {
	zapcore.Core
	stopping *atomic.Bool
}

// closingMessage is what etcd logs when a client or peer listener ends.
const closingMessage = "setting up serving from embedded etcd failed."

func (c *quietStopCore) With(fields []zapcore.Field) zapcore.Core {
	return &quietStopCore{Core: c.Core.With(fields), stopping: c.stopping}
}

func (c *quietStopCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.stopping.Load() && ent.Message == closingMessage {
		return ce
	}
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

// ParseURL checks a listen URL as Start does: http://host:port, or
// https://host:port for a listener with TLS, the host an IP address or
// "localhost". what names the URL in the error ("client", "peer").
func ParseURL(what, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: %s URL %q: %w", what, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("embedetcd: %s URL %q: want an http:// or https:// URL", what, raw)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("embedetcd: %s URL %q: want %s://host:port and nothing else", what, raw, u.Scheme)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: %s URL %q: want %s://host:port: %w", what, raw, u.Scheme, err)
	}
	if host != "localhost" && net.ParseIP(host) == nil {
		return nil, fmt.Errorf("embedetcd: %s URL %q: the host must be an IP address or localhost", what, raw)
	}
	if port == "" {
		return nil, fmt.Errorf("embedetcd: %s URL %q: missing port", what, raw)
	}
	u.Path = ""
	return u, nil
}

// parseURL checks the listen URL raw (def when empty) and that its scheme
// agrees with t: https with TLS, http without.
func parseURL(what, raw, def string, t *TLS) (*url.URL, error) {
	if raw == "" {
		raw = def
	}
	u, err := ParseURL(what, raw)
	if err != nil {
		return nil, err
	}
	switch {
	case t == nil && u.Scheme == "https":
		return nil, fmt.Errorf("embedetcd: %s URL %q: https needs a TLS certificate and key", what, raw)
	case t != nil && u.Scheme == "http":
		return nil, fmt.Errorf("embedetcd: %s URL %q: with TLS, want an https:// URL", what, raw)
	case t != nil:
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("embedetcd: %s TLS: %w", what, err)
		}
	}
	return u, nil
}

// advertised returns the URL others use to reach a listen URL: an
// unspecified host (0.0.0.0, ::) is replaced by the loopback address.
func advertised(u url.URL) url.URL {
	host, port, _ := net.SplitHostPort(u.Host)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		loop := "127.0.0.1"
		if ip.To4() == nil {
			loop = "::1"
		}
		u.Host = net.JoinHostPort(loop, port)
	}
	return u
}

// lockFile is the file in the data directory that a running Server
// holds locked, so that a second server on the same directory fails at once
// instead of waiting forever for etcd's own file locks.
const lockFile = "muster.lock"

// lockDataDir creates dir if needed and locks it for this process.
func lockDataDir(dir string) (*fileutil.LockedFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrDataDir, dir)
	}
	path := filepath.Join(dir, lockFile)
	l, err := fileutil.TryLockFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	switch {
	case errors.Is(err, fileutil.ErrLocked):
		return nil, fmt.Errorf("%w: %s is in use by another running server (%s is locked)", ErrDataDir, dir, path)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	return l, nil
}

// classify makes errors from embed.StartEtcd match this package's
// sentinels.
func classify(err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.EADDRINUSE) || strings.Contains(msg, "address already in use"):
		return fmt.Errorf("%w: %v", ErrAddrInUse, err)
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EROFS) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	return fmt.Errorf("embedetcd: start etcd: %w", err)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
