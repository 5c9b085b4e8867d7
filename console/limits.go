package console

import (
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The bounds on the event streams a console serves at once: each stream
// holds a connection, a goroutine and, for a service page, a watch of that
// service, so neither one client nor all of them together may open them
// without end. A browser tab holds one stream.
const (
	// maxStreams bounds the event streams open at once, all clients.
	maxStreams = 512
	// maxStreamsPerClient bounds the event streams open at once from one
	// client address.
	maxStreamsPerClient = 32
)

// streamSlots counts the open event streams, in all and per client
// address.
type streamSlots struct {
	mu       sync.Mutex
	open     int
	byClient map[string]int
}

// acquire takes a slot for a stream of the client at remoteAddr, or
// reports that there is none (what is full).
func (sl *streamSlots) acquire(remoteAddr string) (release func(), full string) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	switch {
	case sl.open >= maxStreams:
		return nil, "the console serves at most 512 event streams at once"
	case sl.byClient[host] >= maxStreamsPerClient:
		return nil, "one client address may open at most 32 event streams at once"
	}
	if sl.byClient == nil {
		sl.byClient = map[string]int{}
	}
	sl.open++
	sl.byClient[host]++
	var once sync.Once
	return func() {
		once.Do(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			sl.open--
			if sl.byClient[host]--; sl.byClient[host] == 0 {
				delete(sl.byClient, host)
			}
		})
	}, ""
}

// limited serves h as an event stream within the bounds: a stream beyond
// them is refused with 429 Too Many Requests, saying which bound.
func (s *Server) limited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		release, full := s.slots.acquire(r.RemoteAddr)
		if release == nil {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "console: too many event streams: "+full, http.StatusTooManyRequests)
			return
		}
		defer release()
		h(w, r)
	}
}

// listed reports whether the registry lists service (it has a key), so
// that a service page's stream, which watches its service, is opened only
// for a service that exists.
func (s *Server) listed(r *http.Request, service string) (bool, error) {
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
const (
	loginBurst          = 10
	loginEvery          = time.Second
	maxConcurrentLogins = 2
	// maxLoginClients bounds the client addresses whose attempts are
	// remembered; past it the oldest are forgotten.
	maxLoginClients = 4096
)

// loginThrottle limits login attempts per client address and the password
// checks running at once.
type loginThrottle struct {
	mu       sync.Mutex
	byClient map[string]*loginBucket
	checks   chan struct{} // a place per running check
	// logTokens, lastLog and unlogged rate-limit the lines of refused
	// logins (logRefusal).
	logTokens float64
	lastLog   time.Time
	unlogged  uint64
}

type loginBucket struct {
	tokens float64
	last   time.Time
}

func newLoginThrottle() *loginThrottle {
	return &loginThrottle{byClient: map[string]*loginBucket{}, checks: make(chan struct{}, maxConcurrentLogins)}
}

// admit takes an attempt of the client at remoteAddr at now, and a place
// for its check; release gives the place back. It returns nil and why not
// when the client tried too often or too many checks run.
func (lt *loginThrottle) admit(remoteAddr string, now time.Time) (release func(), why string) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	lt.mu.Lock()
	b := lt.byClient[host]
	if b == nil {
		if len(lt.byClient) >= maxLoginClients {
			for k := range lt.byClient { // forget one, any: the map stays bounded
				delete(lt.byClient, k)
				break
			}
		}
		b = &loginBucket{tokens: loginBurst, last: now}
		lt.byClient[host] = b
	}
	b.tokens = min(loginBurst, b.tokens+float64(now.Sub(b.last))/float64(loginEvery))
	b.last = now
	if b.tokens < 1 {
		lt.mu.Unlock()
		return nil, "too many login attempts from this address; wait a second"
	}
	b.tokens--
	lt.mu.Unlock()
	select {
	case lt.checks <- struct{}{}:
		return func() { <-lt.checks }, ""
	default:
		return nil, "too many logins at once; try again"
	}
}

// logRefusal reports whether a refused login may be logged at now (a burst
// of loginBurst lines, then at most one a second), and how many refusals
// were not logged before it.
func (lt *loginThrottle) logRefusal(now time.Time) (ok bool, suppressed uint64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.lastLog.IsZero() {
		lt.logTokens = loginBurst
	} else {
		lt.logTokens = min(loginBurst, lt.logTokens+now.Sub(lt.lastLog).Seconds())
	}
	lt.lastLog = now
	if lt.logTokens < 1 {
		lt.unlogged++
		return false, 0
	}
	lt.logTokens--
	suppressed, lt.unlogged = lt.unlogged, 0
	return true, suppressed
}
