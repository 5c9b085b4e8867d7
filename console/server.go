package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"

	"github.com/musterhq/muster/internal/hostguard"
	"github.com/musterhq/muster/registry"
)

var _ http.Handler = (*Server)(nil)

// Server is the console: an http.Handler for the paths under /ui/.
type Server struct {
	// parts are the registries read: one named "" (New), or several
	// sorted by name (NewClusters).
	parts []*part
	// view is the one cluster's Discovery, merged with the WithLegacy
	// sources if any, or the union of the clusters'.
	view lister
	// closers close what newView or NewClusters opened, in order (never
	// a store).
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

// New returns a console over the registry of store (etcd.NewStore,
// zookeeper.Open). It reads the registry through the store's Discovery,
// canaries and policies, and writes through its Admin (as each session's
// user, from registry.SourceConsole). It does not read the registry until
// a page asks. store stays owned by the caller: Close does not close it,
// and it must outlive the Server. NewClusters reads several registries.
//
// What a backend lacks, the pages leave out: without a journal
// (registry.HistoryReader) a service page says the registry keeps no
// history; without leases (etcd.LeaseReader) it shows no lease times.
// WithLegacy reads etcd layouts and needs an *etcd.Store.
func New(store registry.Store, opts ...Option) (*Server, error) {
	if store == nil {
		return nil, errors.New("console: New: nil store")
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	p, err := newPart("", "", store)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	view, closers, err := newView(store, p.d, o)
	if err != nil {
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
	s.logins = newLoginThrottle(o.ipv4Bits)
	s.slots = newStreamSlots(o.ipv4Bits)
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
// not close the stores. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.fleet.close()
		for _, c := range s.closers {
			_ = c()
		}
	})
	return nil
}
