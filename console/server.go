package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/hostguard"
	"github.com/musterhq/muster/registry/etcd"
)

var _ http.Handler = (*Server)(nil)

// Server is the console: an http.Handler for the paths under /ui/.
type Server struct {
	// parts are the etcd clusters read: one named "" (New), or several
	// sorted by name (NewClusters).
	parts []*part
	// view is the one cluster's Discovery, merged with the WithLegacy
	// sources if any, or the union of the clusters'.
	view lister
	// closers close what newView or NewClusters opened, in order.
	closers []func() error
	opts    options
	// handler serves the pages and the API, behind the Host check.
	handler http.Handler
	auth    *auth
	// fleet feeds every services page's stream.
	fleet *fleetHub
	// slots bounds the event streams open at once.
	slots streamSlots
	// logins bounds login attempts.
	logins *loginThrottle
	// xdsState is the xDS clients page's state, shared by its viewers.
	xdsState xdsHub

	// ctx ends the event streams at Close.
	ctx    context.Context
	cancel context.CancelFunc

	closeOnce sync.Once
}

// New returns a console over the registry that cli reaches. It does not
// contact etcd until a page asks. cli stays owned by the caller and must
// outlive the Server. NewClusters reads several clusters.
func New(cli *clientv3.Client, opts ...Option) (*Server, error) {
	if cli == nil {
		return nil, errors.New("console: New: nil client")
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	p, err := newPart("", "", cli, o)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	dopts := []etcd.Option{etcd.WithPrefix(o.prefix), etcd.WithRequestTimeout(o.requestTimeout), etcd.WithLogger(o.log)}
	view, closers, err := newView(cli, p.d, o, dopts)
	if err != nil {
		_ = p.d.Close()
		return nil, err
	}
	return newServer([]*part{p}, view, closers, o), nil
}

// newServer is the console over parts, read through view; closers close
// what view needs beside the parts' Discoveries.
func newServer(parts []*part, view lister, closers []func() error, o options) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{parts: parts, view: view, closers: closers, opts: o,
		ctx: ctx, cancel: cancel, auth: newAuth(o.adminToken, o.users, o.usersFile, o.log)}
	if weak := o.users.weak(); len(weak) > 0 {
		o.log.Error(weakHashes, "users", strings.Join(weak, ", "))
	}
	s.fleet = newFleetHub(s)
	s.logins = newLoginThrottle()
	s.slots = newStreamSlots()
	mux := s.routes()
	pages := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
	hosts, _ := hostguard.New("", o.hosts...) // checked by WithAllowedHosts
	s.handler = hosts.Handler("console: this console", "WithAllowedHosts (muster --console-host)", pages)
	return s
}

func (s *Server) routes() *http.ServeMux {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/api/session", s.handleSession)
	mux.HandleFunc("POST /ui/api/login", s.handleLogin)
	mux.HandleFunc("POST /ui/api/logout", s.handleLogout)
	mux.HandleFunc("POST /ui/api/action", s.handleAction)
	mux.HandleFunc("POST /ui/api/policy", s.handlePolicy)
	mux.HandleFunc("GET /ui/api/policy/fields", s.handlePolicyFields)
	mux.HandleFunc("GET /ui/api/services/events", s.limited(s.handleFleetEvents))
	mux.HandleFunc("GET /ui/api/service/events", s.limited(s.handleServiceEvents))
	mux.HandleFunc("GET /ui/api/xds/events", s.limited(s.handleXDSEvents))
	return mux
}

// ServeHTTP serves the console's pages and API under /ui/, to the hosts
// it answers to (WithAllowedHosts).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}

// Close ends every event stream and stops following the registry. It does
// not close the etcd client. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.fleet.close()
		for _, c := range s.closers {
			_ = c()
		}
		for _, p := range s.parts {
			_ = p.d.Close()
		}
	})
	return nil
}
