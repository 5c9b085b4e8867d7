package console

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/musterhq/muster/internal/hostguard"
	"github.com/musterhq/muster/registry"
)

// Defaults of the options.
const (
	defaultRequestTimeout = 5 * time.Second
	defaultRelist         = 2 * time.Second
	// heartbeat is how often an idle event stream sends a comment, so
	// that proxies and browsers keep it open.
	heartbeat = 15 * time.Second
	// sessionTTL is how long an admin login lasts.
	sessionTTL = 12 * time.Hour
)

// Option configures a Server.
type Option func(*options)

type options struct {
	prefix         string
	adminToken     string
	users          users
	usersFile      *usersFile // WithAdminUsersFile's; nil: none
	log            *slog.Logger
	requestTimeout time.Duration
	relist         time.Duration
	xds            XDSClients
	legacy         []legacySource
	hosts          []string // WithAllowedHosts, as given (checked by hostguard.New)
	secureCookie   bool     // WithSecureCookie
	ipv4Bits       int      // WithClientIPv4Prefix; 0: each address a client
	err            error
}

func buildOptions(opts []Option) options {
	o := options{
		prefix:         registry.DefaultPrefix,
		log:            slog.Default(),
		requestTimeout: defaultRequestTimeout,
		relist:         defaultRelist,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// WithPrefix names the key prefix under which the store's services live,
// for the muster commands the pages show (--prefix): the store reads and
// writes under the prefix it was opened with (etcd.WithPrefix), which
// this should name. The default is registry.DefaultPrefix; an empty
// prefix or "/" is an error.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix == "" || prefix == "/" {
			o.fail(errors.New("console: WithPrefix: empty prefix"))
			return
		}
		o.prefix = prefix
	}
}

// WithAdminToken enables the actions for whoever logs in with token. The
// default is no token: the console is read-only. A token shorter than 16
// bytes is an error.
func WithAdminToken(token string) Option {
	return func(o *options) {
		if len(token) < 16 {
			o.fail(fmt.Errorf("console: WithAdminToken: the token has %d bytes, want at least 16", len(token)))
			return
		}
		o.adminToken = token
	}
}

// WithAdminUsers enables the actions for operators who log in with a user
// name and password. htpasswd is the text of an htpasswd file of bcrypt
// hashes (htpasswd -nB -C 12 user): a line "user:hash" per user; blank lines and
// lines starting with # are ignored. Actions are logged with the user's
// name. The default is no user. A line that is not a user and a bcrypt
// hash (a plain password, an MD5 or SHA hash), a user listed twice and a
// text without any user are errors. It can be combined with
// WithAdminToken.
//
// A password hash of a bcrypt cost below 10 (htpasswd -B writes 5 without
// -C) is logged at error level at New, naming its user: at that cost a
// guesser with many addresses checks hundreds of passwords a second. Hash
// passwords with htpasswd -B -C 12.
func WithAdminUsers(htpasswd string) Option {
	return func(o *options) {
		if err := ValidateAdminUsers(htpasswd); err != nil {
			o.fail(err)
			return
		}
		o.users, _ = parseUsers(htpasswd)
		o.usersFile = nil
	}
}

// WithAdminUsersFile is WithAdminUsers with the htpasswd text of the file
// at path, read again when the file changes: a user removed from it (or
// whose password it changes) loses its sessions, and a user added may log
// in, within a second of its next request (usersCheckEvery). Each reading
// is logged; a changed file that cannot be read or parsed is logged at
// error level, and the users read before are kept. An unreadable or
// invalid file at New is an error.
func WithAdminUsersFile(path string) Option {
	return func(o *options) {
		f, u, err := readUsersFile(path)
		if err != nil {
			o.fail(fmt.Errorf("console: WithAdminUsersFile: %w", err))
			return
		}
		o.users, o.usersFile = u, f
	}
}

// WithLogger sets the logger, which receives one line per action and per
// login (the store logs to its own). The default is slog.Default(); nil is an error.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.fail(errors.New("console: WithLogger: nil logger"))
			return
		}
		o.log = l
	}
}

// WithXDS adds the page of the xDS clients connected to an xDS control
// plane (an *xds.Server). The default is none: the console has no such
// page. A nil value is an error.
func WithXDS(cp XDSClients) Option {
	return func(o *options) {
		if cp == nil {
			o.fail(errors.New("console: WithXDS: nil control plane"))
			return
		}
		o.xds = cp
	}
}

// WithAllowedHosts adds host names (or IP addresses) the console answers
// to, beside this machine's loopback names (localhost and every loopback
// address), which it always answers to: a request whose Host header names
// another (with any port) is refused with 421 Misdirected Request, so that
// a page of another site cannot reach the console by a DNS name rebound to
// its address. Give the names users and proxies reach the console by. An
// empty name is an error.
func WithAllowedHosts(hosts ...string) Option {
	return func(o *options) {
		if _, err := hostguard.New("", hosts...); err != nil {
			o.fail(fmt.Errorf("console: WithAllowedHosts: %w", err))
			return
		}
		o.hosts = append(o.hosts, hosts...)
	}
}

// WithClientIPv4Prefix groups IPv4 clients by their first bits (8..32)
// for the limits per client: event streams and login attempts. With 24,
// every address of a /24 is one client. The default, 32, makes each
// address a client; IPv6 clients are always grouped by their /64. A value
// out of 8..32 is an error. The HTTP listener's own shares of connections
// are the listener's (muster console --client-ipv4-prefix sets both).
func WithClientIPv4Prefix(bits int) Option {
	return func(o *options) {
		if bits < 8 || bits > 32 {
			o.fail(fmt.Errorf("console: WithClientIPv4Prefix(%d): want 8..32", bits))
			return
		}
		o.ipv4Bits = bits
	}
}

// WithSecureCookie marks the session cookie Secure (sent over HTTPS only)
// even when the request came in plain HTTP, as behind a proxy that
// terminates TLS; without it the cookie is Secure when the console itself
// terminates TLS.
func WithSecureCookie() Option {
	return func(o *options) { o.secureCookie = true }
}

// WithRequestTimeout bounds each request the console makes to a registry
// (a listing of services, a read or a write of its Admin); the store's
// own timeout (etcd.WithRequestTimeout) bounds them too, and its
// Discovery's watches. The default is 5s; a non-positive value is an
// error.
func WithRequestTimeout(d time.Duration) Option {
	return positive("WithRequestTimeout", d, func(o *options) { o.requestTimeout = d })
}

// WithRelistInterval sets how often the console lists the services again
// to find new ones for the services pages, once for all the open pages
// (changes of known services are pushed at once). The default is 2s; a
// non-positive value is an error.
func WithRelistInterval(d time.Duration) Option {
	return positive("WithRelistInterval", d, func(o *options) { o.relist = d })
}

// positive is an option that calls set if d is positive and fails
// otherwise.
func positive(name string, d time.Duration, set func(*options)) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail(fmt.Errorf("console: %s: %v is not positive", name, d))
			return
		}
		set(o)
	}
}
