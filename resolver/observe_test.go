package resolver_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
)

// logSink keeps every record logged through its handler, so that a test
// can wait for a log event and read its attributes.
type logSink struct {
	mu     sync.Mutex
	recs   []logRec
	notify chan struct{} // coalescing: a record was added
}

type logRec struct {
	at    time.Time
	msg   string
	attrs map[string]slog.Value
}

func newLogSink() *logSink { return &logSink{notify: make(chan struct{}, 1)} }

// logger returns a logger writing to the sink.
func (s *logSink) logger() *slog.Logger { return slog.New(sinkHandler{s: s}) }

// wait returns the first record with msg, waiting at most d for it.
func (s *logSink) wait(t *testing.T, msg string, d time.Duration) logRec {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.mu.Lock()
		for _, r := range s.recs {
			if r.msg == msg {
				s.mu.Unlock()
				return r
			}
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-timer.C:
			t.Fatalf("no %q logged within %v; logged: %s", msg, d, s.messages())
		}
	}
}

// count returns how many records with msg were logged.
func (s *logSink) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if r.msg == msg {
			n++
		}
	}
	return n
}

func (s *logSink) messages() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.recs {
		out = append(out, fmt.Sprintf("%q", r.msg))
	}
	return fmt.Sprint(out)
}

type sinkHandler struct {
	s     *logSink
	attrs []slog.Attr
}

func (h sinkHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h sinkHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{at: r.Time, msg: r.Message, attrs: map[string]slog.Value{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Resolve()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	h.s.mu.Lock()
	h.s.recs = append(h.s.recs, rec)
	h.s.mu.Unlock()
	select {
	case h.s.notify <- struct{}{}:
	default:
	}
	return nil
}

func (h sinkHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sinkHandler{s: h.s, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h sinkHandler) WithGroup(string) slog.Handler { return h }

// stateLog records every state a resolver hands a real channel: when, and
// the endpoints' addresses.
type stateLog struct {
	mu     sync.Mutex
	states []seenState
	notify chan struct{} // coalescing: a state was added
}

type seenState struct {
	at    time.Time
	addrs []string // sorted
}

func newStateLog() *stateLog { return &stateLog{notify: make(chan struct{}, 1)} }

// builder wraps b so that the states of its resolvers are recorded.
func (l *stateLog) builder(b grpcresolver.Builder) grpcresolver.Builder {
	return recordingBuilder{Builder: b, l: l}
}

// waitFor waits until a state from index from on satisfies cond, at most
// until deadline, and returns its index and the state.
func (l *stateLog) waitFor(t *testing.T, what string, from int, deadline time.Time, cond func(seenState) bool) (int, seenState) {
	t.Helper()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		l.mu.Lock()
		for i := from; i < len(l.states); i++ {
			if cond(l.states[i]) {
				s := l.states[i]
				l.mu.Unlock()
				return i, s
			}
		}
		l.mu.Unlock()
		select {
		case <-l.notify:
		case <-timer.C:
			t.Fatalf("no state with %s by the deadline; states from %d: %s", what, from, l.describe(from))
		}
	}
}

// since returns the states from index from on.
func (l *stateLog) since(from int) []seenState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states[from:])
}

func (l *stateLog) describe(from int) string {
	var out []string
	for _, s := range l.since(from) {
		out = append(out, fmt.Sprintf("%s: %d endpoints", s.at.Format("15:04:05.000"), len(s.addrs)))
	}
	return fmt.Sprint(out)
}

type recordingBuilder struct {
	grpcresolver.Builder
	l *stateLog
}

func (b recordingBuilder) Build(t grpcresolver.Target, cc grpcresolver.ClientConn, o grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	return b.Builder.Build(t, recordingCC{ClientConn: cc, l: b.l}, o)
}

type recordingCC struct {
	grpcresolver.ClientConn
	l *stateLog
}

func (c recordingCC) UpdateState(s grpcresolver.State) error {
	st := seenState{at: time.Now()}
	for _, ep := range s.Endpoints {
		st.addrs = append(st.addrs, ep.Addresses[0].Addr)
	}
	slices.Sort(st.addrs)
	c.l.mu.Lock()
	c.l.states = append(c.l.states, st)
	c.l.mu.Unlock()
	select {
	case c.l.notify <- struct{}{}:
	default:
	}
	return c.ClientConn.UpdateState(s)
}

// sameAddrs reports whether a state holds exactly addrs.
func sameAddrs(s seenState, addrs []string) bool {
	want := slices.Sorted(slices.Values(addrs))
	return slices.Equal(s.addrs, want)
}
