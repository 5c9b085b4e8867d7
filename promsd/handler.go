package promsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster/registry"
)

// ErrNoServices is returned by NewHandler when no WithServices is given and
// the Discovery cannot list services (it does not implement
// registry.ServiceLister).
var ErrNoServices = errors.New("promsd: no services to serve: give WithServices or a Discovery that implements registry.ServiceLister")

// Handler is an http.Handler answering Prometheus's HTTP service discovery
// with the targets of the services it follows. See the package
// documentation.
type Handler struct {
	d   registry.Discovery
	o   options
	log *slog.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	follows map[string]*follow
	sorted  atomic.Pointer[[]*follow] // the values of follows by name, for ServeHTTP
}

var _ http.Handler = (*Handler)(nil)

// Stats are a Handler's counts, at the last change of each service.
type Stats struct {
	// Services is how many services the Handler follows.
	Services int
	// Targets is how many targets it serves.
	Targets int
	// SkippedTargets is how many instances it leaves out because their
	// metrics address (metadata key MetadataKey) does not parse.
	SkippedTargets int
	// SkippedLabels is how many metadata keys of its targets it leaves out
	// of their labels because they could set Prometheus's own labels or
	// the target's job or instance (SafeKey).
	SkippedLabels int
}

// NewHandler returns a Handler following d's services: those of
// WithServices, or every service d lists. It does not wait for the
// registry: a service is served once its first list is known. Close stops
// it; d stays open.
func NewHandler(d registry.Discovery, opts ...Option) (*Handler, error) {
	if d == nil {
		return nil, errors.New("promsd: NewHandler: nil Discovery")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	lister, canList := d.(registry.ServiceLister)
	if len(o.services) == 0 && !canList {
		return nil, ErrNoServices
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{d: d, o: o, log: o.log, ctx: ctx, cancel: cancel, follows: map[string]*follow{}}
	h.sorted.Store(&[]*follow{})
	if len(o.services) > 0 {
		for _, s := range o.services {
			if err := h.follow(s); err != nil {
				_ = h.Close()
				return nil, err
			}
		}
		return h, nil
	}
	h.wg.Add(1)
	go h.listLoop(lister)
	return h, nil
}

// Close stops following the services and closes the watchers. It is
// idempotent; ServeHTTP answers with what it knew.
func (h *Handler) Close() error {
	h.cancel()
	h.wg.Wait()
	return nil
}

// Stats returns the Handler's counts.
func (h *Handler) Stats() Stats {
	fs := *h.sorted.Load()
	st := Stats{Services: len(fs)}
	for _, f := range fs {
		if v := f.view.Load(); v != nil {
			st.Targets += v.targets
			st.SkippedTargets += v.skipped
			st.SkippedLabels += v.unsafe
		}
	}
	return st
}

// ServeHTTP answers GET and HEAD with the JSON array of target groups of
// the followed services (of those the query parameter service names, when
// given), from the encodings made at each service's last change.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "promsd: method "+r.Method+" not allowed", http.StatusMethodNotAllowed)
		return
	}
	want, err := serviceFilter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fs := *h.sorted.Load()
	parts := make([][]byte, 0, len(fs))
	n := 2
	for _, f := range fs {
		if want != nil && !want[f.name] {
			continue
		}
		if v := f.view.Load(); v != nil && len(v.body) > 0 {
			if len(parts) > 0 {
				n++
			}
			n += len(v.body)
			parts = append(parts, v.body)
		}
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json; charset=utf-8")
	hd.Set("Content-Length", strconv.Itoa(n))
	if r.Method == http.MethodHead {
		return
	}
	buf := make([]byte, 0, min(n, 64<<10))
	buf = append(buf, '[')
	for i, p := range parts {
		if i > 0 {
			buf = append(buf, ',')
		}
		for len(p) > 0 {
			k := min(len(p), cap(buf)-len(buf))
			buf, p = append(buf, p[:k]...), p[k:]
			if len(buf) == cap(buf) {
				if _, err := w.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
			}
		}
	}
	buf = append(buf, ']')
	_, _ = w.Write(buf)
}

// serviceFilter returns the services the query names (parameter service,
// repeated or comma-separated), nil for all.
func serviceFilter(r *http.Request) (map[string]bool, error) {
	vals, ok := r.URL.Query()["service"]
	if !ok {
		return nil, nil
	}
	want := map[string]bool{}
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if err := registry.ValidateName(s); err != nil {
				return nil, fmt.Errorf("promsd: query parameter service: %q: %w", s, err)
			}
			want[s] = true
		}
	}
	return want, nil
}

// follow starts following service unless it is followed already.
func (h *Handler) follow(service string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.follows[service]; ok {
		return nil
	}
	if h.ctx.Err() != nil {
		return errors.New("promsd: closed")
	}
	ctx, cancel := context.WithCancel(h.ctx)
	w, err := h.d.Watch(ctx, service)
	if err != nil {
		cancel()
		return fmt.Errorf("promsd: follow %s: %w", service, err)
	}
	f := &follow{name: service, w: w, cancel: cancel, log: h.log, logged: map[string]bool{}}
	h.follows[service] = f
	h.publish()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f.run(ctx)
	}()
	return nil
}

// publish stores the followed services, sorted by name, for ServeHTTP.
// h.mu is held.
func (h *Handler) publish() {
	fs := make([]*follow, 0, len(h.follows))
	for _, f := range h.follows {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *follow) int { return strings.Compare(a.name, b.name) })
	h.sorted.Store(&fs)
}

// listLoop follows every service the Discovery lists, now and every list
// interval, and forgets a followed service no longer listed once it has no
// instance left, until Close.
func (h *Handler) listLoop(l registry.ServiceLister) {
	defer h.wg.Done()
	t := time.NewTicker(h.o.listInterval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(h.ctx, listTimeout)
		names, err := l.Services(ctx)
		cancel()
		switch {
		case h.ctx.Err() != nil:
			return
		case err != nil:
			h.log.Warn("promsd: cannot list services; serving those known", "error", err)
		default:
			for _, n := range names {
				if err := h.follow(n); err != nil {
					h.log.Warn("promsd: cannot follow service", "service", n, "error", err)
				}
			}
			h.forgetGone(names)
		}
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forgetGone stops following the services not in listed that have no
// instance left.
func (h *Handler) forgetGone(listed []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := false
	for name, f := range h.follows {
		if slices.Contains(listed, name) || len(f.w.Snapshot().Instances) > 0 {
			continue
		}
		f.cancel()
		delete(h.follows, name)
		changed = true
	}
	if changed {
		h.publish()
	}
}

// follow is one followed service: its watcher and its encoded answer.
type follow struct {
	name   string
	w      registry.Watcher
	cancel context.CancelFunc
	log    *slog.Logger
	view   atomic.Pointer[view]

	// Owned by run.
	cache  map[*registry.Instance]encoded // by the instances of the last snapshot
	logged map[string]bool                // bad metrics addresses and unsafe keys logged, by ID and value
}

// view is a service's encoded part of the answer.
type view struct {
	body    []byte // its target groups, separated by commas, without brackets
	targets int
	skipped int
	unsafe  int // metadata keys left out of the labels
}

// run encodes the service at every change of its snapshot until ctx ends
// or the watcher closes.
func (f *follow) run(ctx context.Context) {
	defer func() { _ = f.w.Close() }()
	for {
		if s := f.w.Snapshot(); s.Loaded {
			f.build(s)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-f.w.Updates():
			if !ok {
				return
			}
		}
	}
}

// build encodes s, reusing the encoding of every instance that kept its
// pointer, and logs each bad metrics address, and each instance's unsafe
// metadata keys, once.
func (f *follow) build(s registry.Snapshot) {
	cache := make(map[*registry.Instance]encoded, len(s.Instances))
	logged := make(map[string]bool)
	v := &view{}
	var body []byte
	for _, in := range s.Instances {
		e, ok := f.cache[in]
		if !ok {
			e = encode(f.name, in)
		}
		cache[in] = e
		switch {
		case e.err != nil:
			v.skipped++
			key := in.ID + "\x00" + in.Metadata[MetadataKey]
			if !f.logged[key] {
				f.log.Warn("promsd: instance left out of the targets: bad metrics address",
					"service", f.name, "id", in.ID, "error", e.err)
			}
			logged[key] = true
		case e.json != nil:
			if e.unsafe > 0 {
				v.unsafe += e.unsafe
				key := in.ID + "\x00unsafe\x00" + strconv.Itoa(e.unsafe)
				if !f.logged[key] {
					f.log.Warn("promsd: metadata keys left out of a target's labels: they could set Prometheus's own labels or the target's job or instance",
						"service", f.name, "id", in.ID, "keys", e.unsafe)
				}
				logged[key] = true
			}
			if v.targets > 0 {
				body = append(body, ',')
			}
			body = append(body, e.json...)
			v.targets++
		}
	}
	v.body = body
	f.cache, f.logged = cache, logged
	f.view.Store(v)
}
