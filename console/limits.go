package console

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/ratelimit"
)

// newStreamSlots returns the bounds on the event streams a console serves
// at once: each stream holds a connection, a goroutine and, for a service
// page, a watch of that service, so neither one client nor all of them
// together may open them without end. A browser tab holds one stream. One
// client (an address; IPv6 by /64) holds at most 32, all clients 512, and
// the last 64 places are kept for clients that hold none: clients that
// fill their shares (16 of them would fill 512) leave a new client's page
// its stream.
func newStreamSlots() *admission.Pool {
	return &admission.Pool{What: "event streams", Max: 512, Share: 32, Reserve: 64}
}

// limited serves h as an event stream within the bounds: a stream beyond
// them is refused with 429 Too Many Requests, saying which bound.
func (s *Server) limited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		release, err := s.slots.Acquire(r.RemoteAddr)
		if err != nil {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "console: too many event streams: "+err.Error(), http.StatusTooManyRequests)
			return
		}
		defer release()
		h(w, r)
	}
}

// listed reports whether the registry lists service (it has a key), so
// that a service page's stream, which watches its service, is opened only
// for a service that exists. Over several clusters see listedInSome.
func (s *Server) listed(r *http.Request, service string) (bool, error) {
	if s.several() {
		return s.listedInSome(r.Context(), service)
	}
	names, err := s.view.Services(r.Context())
	if err != nil {
		return false, err
	}
	_, ok := slices.BinarySearch(names, service)
	return ok, nil
}

// The bounds on logins: a password is checked with bcrypt (by design tens
// of milliseconds of CPU, in the process that may also run etcd), so one
// client address may try at most loginBurst times at once and then one
// every loginEvery, and at most maxConcurrentLogins checks run at once.
// Refused logins are logged at the same pace, all addresses together.
const (
	loginBurst          = 10
	loginEvery          = time.Second
	maxConcurrentLogins = 2
	// maxLoginClients bounds the client addresses whose attempts are
	// remembered; past it one is forgotten for each new one.
	maxLoginClients = 4096
)

// loginThrottle limits login attempts per client (an address; IPv6 by its
// /64: admission.Group), the password
// checks running at once, and the lines of refused logins.
type loginThrottle struct {
	mu       sync.Mutex
	byClient map[string]*ratelimit.Bucket
	checks   chan struct{} // a place per running check
	refusals *ratelimit.Bucket
}

func newLoginThrottle() *loginThrottle {
	return &loginThrottle{byClient: map[string]*ratelimit.Bucket{}, checks: make(chan struct{}, maxConcurrentLogins),
		refusals: &ratelimit.Bucket{Burst: loginBurst, Every: loginEvery}}
}

// admit takes an attempt of the client at remoteAddr at now, and a place
// for its check; release gives the place back. It returns nil and why not
// when the client tried too often or too many checks run.
func (lt *loginThrottle) admit(remoteAddr string, now time.Time) (release func(), why string) {
	host := admission.Group(remoteAddr, 0) // an IPv6 client by its /64
	lt.mu.Lock()
	b := lt.byClient[host]
	if b == nil {
		if len(lt.byClient) >= maxLoginClients {
			for k := range lt.byClient { // forget one, any: the map stays bounded
				delete(lt.byClient, k)
				break
			}
		}
		b = &ratelimit.Bucket{Burst: loginBurst, Every: loginEvery}
		lt.byClient[host] = b
	}
	lt.mu.Unlock()
	if ok, _ := b.Allow(now); !ok {
		return nil, "too many login attempts from this address; wait a second"
	}
	select {
	case lt.checks <- struct{}{}:
		return func() { <-lt.checks }, ""
	default:
		return nil, "too many logins at once; try again"
	}
}

// logRefusal reports whether a refused login may be logged at now, and
// how many refusals were not logged before it.
func (lt *loginThrottle) logRefusal(now time.Time) (ok bool, suppressed int) {
	return lt.refusals.Allow(now)
}
