package settingfeed

import (
	"context"
	"sync"
)

// Shared shares one follower of each service's setting among every reader
// of it: a Store's WatchCanary and WatchPolicy, so that the channels,
// consoles and control planes of one process that follow a service's
// setting cost the backend one watch, however many resolvers' Builders
// they come from. The zero value is not usable: set Follow.
type Shared[T any] struct {
	// Follow starts the backend's follower of service's setting, which
	// sends its value when first read and after each change until ctx
	// ends, then closes the channel.
	Follow func(ctx context.Context, service string) <-chan T

	mu       sync.Mutex
	services map[string]*shared[T]
}

// shared is one service's follower and its readers; guarded by
// Shared.mu.
type shared[T any] struct {
	cancel context.CancelFunc
	subs   map[chan T]struct{}
	last   T
	read   bool // last holds a value read
}

// Watch follows service's setting until ctx ends, as Follow does: the
// channel receives the setting when it is first read (at once when
// another reader has it already) and after each change, coalescing to the
// latest, and is closed after ctx ends. The first reader of a service
// starts its follower, the last one to leave stops it.
func (s *Shared[T]) Watch(ctx context.Context, service string) <-chan T {
	ch := make(chan T, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.services == nil {
		s.services = map[string]*shared[T]{}
	}
	e := s.services[service]
	if e == nil {
		fctx, cancel := context.WithCancel(context.Background())
		e = &shared[T]{cancel: cancel, subs: map[chan T]struct{}{}}
		s.services[service] = e
		go s.run(e, s.Follow(fctx, service))
	}
	e.subs[ch] = struct{}{}
	if e.read {
		ch <- e.last
	}
	context.AfterFunc(ctx, func() { s.leave(service, e, ch) })
	return ch
}

// run hands each value of the follower to the service's readers.
func (s *Shared[T]) run(e *shared[T], values <-chan T) {
	for v := range values {
		s.mu.Lock()
		e.last, e.read = v, true
		for ch := range e.subs {
			select {
			case <-ch:
			default:
			}
			ch <- v
		}
		s.mu.Unlock()
	}
}

// leave closes ch and takes it from the service's readers; the last one
// stops the follower.
func (s *Shared[T]) leave(service string, e *shared[T], ch chan T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(e.subs, ch)
	close(ch)
	if len(e.subs) == 0 {
		e.cancel()
		if s.services[service] == e {
			delete(s.services, service)
		}
	}
}
