package console

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/ratelimit"
)

// streamSlots are the bounds on the event streams a console serves at
// once: each stream holds a connection, a goroutine and, for a service
// page, a watch of that service, so neither one client nor all of them
// together may open them without end. A browser tab holds one stream.
type streamSlots struct {
	// anyone: one client (an address; IPv6 by /64) holds at most 32, all
	// clients 512, and the last 64 places are kept for clients that hold
	// none: clients that fill their shares (16 of them would fill 512)
	// leave a new client's page its stream.
	anyone *admission.Pool
	// signedIn: 64 more places, 16 a client, for the streams of signed-in
	// admin sessions, so that many addresses filling every place of
	// anyone (80 would) leave an operator's pages their streams.
	signedIn *admission.Pool
}

// newStreamSlots returns the bounds, grouping IPv4 clients by their first
// ipv4Bits bits (admission.Pool.IPv4Bits).
func newStreamSlots(ipv4Bits int) streamSlots {
	return streamSlots{
		anyone:   &admission.Pool{What: "event streams", Max: 512, Share: 32, Reserve: 64, IPv4Bits: ipv4Bits},
		signedIn: &admission.Pool{What: "event streams of signed-in sessions", Max: 64, Share: 16, IPv4Bits: ipv4Bits},
	}
}

// acquire takes a place for r's stream: for a signed-in session, one of
// its reserve if any is left, else one of anyone's.
func (sl streamSlots) acquire(r *http.Request, a *auth) (release func(), err error) {
	if _, _, ok := a.session(r, time.Now()); ok {
		if release, err := sl.signedIn.Acquire(r.RemoteAddr); err == nil {
			return release, nil
		}
	}
	return sl.anyone.Acquire(r.RemoteAddr)
}

// limited serves h as an event stream within the bounds: a stream beyond
// them is refused with 429 Too Many Requests, saying which bound.
func (s *Server) limited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		release, err := s.slots.acquire(r, s.auth)
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
// for a service that exists. Over several clusters see listedInSome. When
// no cluster answered, the error is a noAnswer.
func (s *Server) listed(r *http.Request, service string) (bool, error) {
	if s.several() {
		return s.listedInSome(r.Context(), service)
	}
	ctx, cancel := s.request(r.Context())
	defer cancel()
	names, err := s.view.Services(ctx)
	if err != nil {
		return false, noAnswer{err}
	}
	_, ok := slices.BinarySearch(names, service)
	return ok, nil
}

// noAnswer is the error of listed when no cluster answered: the registry
// is unreachable, and whether the service exists is unknown.
type noAnswer struct{ error }

func (e noAnswer) Unwrap() error { return e.error }

// The bounds on logins: a password is checked with bcrypt (by design tens
// of milliseconds of CPU, in the process that may also run etcd). One
// client (an address; IPv6 by its /64: admission.Group) may try at most
// loginBurst times at once and then one every loginEvery, with one check
// running at a time. A client whose login failed in the last
// suspectFor is a suspect: its attempts also draw on the allowance of the
// user name they give (loginBurst, then one every loginEvery), shared by
// every suspect client. So guessing one user's password from many
// addresses costs one check per address and then one a second in all,
// while a client that has not failed (the admin at the keyboard) is
// checked at once, never refused because others guess. Refused logins are
// logged at the same pace, all clients together.
const (
	loginBurst = 10
	loginEvery = time.Second
	suspectFor = 15 * time.Minute
	// maxLoginClients bounds the clients, and the user names, whose
	// attempts are remembered; past it one is forgotten for each new one.
	maxLoginClients = 4096
)

// loginThrottle limits login attempts per client and per user name, the
// checks of each client, and the lines of refused logins.
type loginThrottle struct {
	ipv4Bits int // groups IPv4 clients (admission.Group)
	mu       sync.Mutex
	byClient map[string]*ratelimit.Bucket // attempts of each client
	byUser   map[string]*ratelimit.Bucket // attempts of suspect clients, by the user name they give
	failed   map[string]time.Time         // the last failed login of each suspect client
	checking map[string]bool              // clients with a check running
	refusals *ratelimit.Bucket
}

func newLoginThrottle(ipv4Bits int) *loginThrottle {
	return &loginThrottle{ipv4Bits: ipv4Bits, byClient: map[string]*ratelimit.Bucket{}, byUser: map[string]*ratelimit.Bucket{},
		failed: map[string]time.Time{}, checking: map[string]bool{},
		refusals: &ratelimit.Bucket{Burst: loginBurst, Every: loginEvery}}
}

// bucket returns m's bucket for key, making one (and forgetting another
// when m holds maxLoginClients) if there is none.
func bucket(m map[string]*ratelimit.Bucket, key string) *ratelimit.Bucket {
	b := m[key]
	if b == nil {
		forgetOne(m)
		b = &ratelimit.Bucket{Burst: loginBurst, Every: loginEvery}
		m[key] = b
	}
	return b
}

// forgetOne deletes an entry of m, any, when it holds maxLoginClients.
func forgetOne[V any](m map[string]V) {
	if len(m) < maxLoginClients {
		return
	}
	for k := range m {
		delete(m, k)
		return
	}
}

// admit takes an attempt to log in as user of the client at remoteAddr at
// now, and the client's place for its check; done gives the place back
// and records whether the login succeeded. It returns nil and why not
// when the attempt is refused.
func (lt *loginThrottle) admit(remoteAddr, user string, now time.Time) (done func(ok bool), why string) {
	client := admission.Group(remoteAddr, lt.ipv4Bits)
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if ok, _ := bucket(lt.byClient, client).Allow(now); !ok {
		return nil, "too many login attempts from this address; wait a second"
	}
	if lt.checking[client] {
		return nil, "a login from this address is being checked; try again"
	}
	if at, ok := lt.failed[client]; ok && now.Sub(at) < suspectFor {
		if ok, _ := bucket(lt.byUser, clipName(user)).Allow(now); !ok {
			return nil, "too many failed logins for this user name; wait a second"
		}
	}
	lt.checking[client] = true
	return func(ok bool) {
		lt.mu.Lock()
		defer lt.mu.Unlock()
		delete(lt.checking, client)
		if ok {
			delete(lt.failed, client)
			return
		}
		if _, known := lt.failed[client]; !known {
			forgetOne(lt.failed)
		}
		lt.failed[client] = time.Now()
	}, ""
}

// logRefusal reports whether a refused login may be logged at now, and
// how many refusals were not logged before it.
func (lt *loginThrottle) logRefusal(now time.Time) (ok bool, suppressed int) {
	return lt.refusals.Allow(now)
}
