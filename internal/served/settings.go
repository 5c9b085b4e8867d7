package served

import (
	"context"
	"sync"

	"github.com/musterhq/muster/registry"
)

// settingsHub follows each service's canary setting and call policy
// (Config.Canaries, Config.Policies) once per Pipeline, for every follower
// of the service, whatever its target's filters: the first follower of a
// service starts one reader of each, the last one to close stops them. The
// zero value is ready.
type settingsHub struct {
	mu       sync.Mutex
	services map[string]*serviceSettings
}

// serviceSettings is one service's settings and the followers that read
// them; guarded by settingsHub.mu.
type serviceSettings struct {
	canary registry.Canary
	policy registry.Policy
	read   bool // a value of either has arrived
	// unread counts the sources followed whose first value has not
	// arrived; ready is closed when it reaches 0.
	unread int
	ready  chan struct{}
	subs   map[*Follower]chan struct{}
	cancel context.CancelFunc
}

// join makes r read service's settings and returns the channel that is
// signalled (coalescing) when they change, signalled at once when they are
// known already, and the channel closed once each source's first value
// has arrived (a new follower's first list waits for it: run). The first
// follower of the service starts the readers of p's sources.
func (h *settingsHub) join(p *Pipeline, service string, r *Follower) (changed, ready <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.services == nil {
		h.services = map[string]*serviceSettings{}
	}
	s := h.services[service]
	if s == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s = &serviceSettings{subs: map[*Follower]chan struct{}{}, cancel: cancel, ready: make(chan struct{})}
		if p.cfg.Canaries != nil {
			s.unread++
		}
		if p.cfg.Policies != nil {
			s.unread++
		}
		if s.unread == 0 {
			close(s.ready)
		}
		h.services[service] = s
		go h.follow(ctx, p, service, s)
	}
	ch := make(chan struct{}, 1)
	s.subs[r] = ch
	if s.read {
		ch <- struct{}{}
	}
	return ch, s.ready
}

// leave ends r's reading of service's settings; the last follower stops
// the readers.
func (h *settingsHub) leave(service string, r *Follower) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.services[service]
	if s == nil {
		return
	}
	delete(s.subs, r)
	if len(s.subs) == 0 {
		s.cancel()
		delete(h.services, service)
	}
}

// current returns service's settings as last read.
func (h *settingsHub) current(service string) (registry.Canary, registry.Policy) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.services[service]; s != nil {
		return s.canary, s.policy
	}
	return registry.Canary{}, registry.Policy{}
}

// follow runs the followers of service's settings until ctx ends, and
// signals the service's followers after each change.
func (h *settingsHub) follow(ctx context.Context, p *Pipeline, service string, s *serviceSettings) {
	var canaries <-chan registry.Canary
	var policies <-chan registry.Policy
	if p.cfg.Canaries != nil {
		canaries = p.cfg.Canaries.WatchCanary(ctx, service)
	}
	if p.cfg.Policies != nil {
		policies = p.cfg.Policies.WatchPolicy(ctx, service)
	}
	// first[i] is true until source i's first value arrives, or its
	// channel closes without one: either ends the wait for it.
	first := [2]bool{canaries != nil, policies != nil}
	for canaries != nil || policies != nil {
		select {
		case c, ok := <-canaries:
			if !ok {
				canaries = nil
				h.set(s, nil, &first[0])
				continue
			}
			h.set(s, func() { s.canary = c }, &first[0])
		case p, ok := <-policies:
			if !ok {
				policies = nil
				h.set(s, nil, &first[1])
				continue
			}
			h.set(s, func() { s.policy = p }, &first[1])
		}
	}
}

// set applies a change (nil: none) to s and signals its followers; *first
// tells that it is the source's first value (or its end before one), which
// may make s ready.
func (h *settingsHub) set(s *serviceSettings, change func(), first *bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *first {
		*first = false
		if s.unread--; s.unread == 0 {
			close(s.ready)
		}
	}
	if change == nil {
		return
	}
	change()
	s.read = true
	for _, ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default: // already signalled: the follower reads the latest
		}
	}
}
