package console

import (
	"net"
	"net/http"
	"slices"
	"sync"
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
