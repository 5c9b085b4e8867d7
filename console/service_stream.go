package console

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// maxLeaseLookups bounds the leases whose time left one event looks up.
const maxLeaseLookups = 64

// leaseRefresh is how often a service page is sent the times its leases
// have left: registrars renew them, so the times read with the last change
// soon say too little.
const leaseRefresh = 5 * time.Second

// resumed is the data of the event that tells a reconnecting page it
// missed nothing.
type resumed struct {
	Revision int64 `json:"revision"`
}

// handleServiceEvents streams the state of the service named by the query
// parameter name: one "state" event at once and after each change, or one
// "resumed" event first if the client's Last-Event-ID is the current
// revision. A service the registry does not list gets 404, and one whose
// existence is unknown because some cluster did not answer 503; when none
// answered, the stream opens, and its states say the registry is
// unreachable until it answers.
func (s *Server) handleServiceEvents(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if err := registry.ValidateName(name); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch ok, err := s.listed(r, name); {
	case errors.As(err, new(noAnswer)):
		// The registry is unreachable: the page opens and says so, with
		// the last known list if there is one (the snapshot's staleness),
		// or that nothing is loaded yet; once the registry answers, a
		// service it does not have shows as one without instances.
	case err != nil:
		http.Error(w, "console: "+err.Error(), http.StatusServiceUnavailable)
		return
	case !ok:
		http.Error(w, "console: no service "+name+" in the registry", http.StatusNotFound)
		return
	}
	ctx, stop := s.streamContext(r)
	defer stop()
	wt, err := s.view.Watch(ctx, name)
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer wt.Close()
	es, err := startStream(w)
	if err != nil {
		return
	}
	st := &serviceStream{s: s, name: name, es: es, last: lastEventID(r), parts: map[string]*partState{}}
	for _, p := range s.parts {
		st.parts[p.name] = &partState{}
	}
	// The canary settings and policies, followed as clients follow them;
	// each value (the first read too, which may differ from what a
	// resumed page holds) is sent with the instances.
	settings, waitSettings := s.followSettings(ctx, name)
	defer func() {
		stop()
		waitSettings()
	}()
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	leaseTick := time.NewTicker(leaseRefresh)
	defer leaseTick.Stop()
	for {
		if st.publish(ctx, wt.Snapshot()) != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wt.Updates():
			if !ok {
				return
			}
		case <-hb.C:
			if es.comment() != nil {
				return
			}
		case <-leaseTick.C:
			if st.refreshLeases(ctx, wt.Snapshot()) != nil {
				return
			}
		case u := <-settings:
			u.apply(st.parts[u.cluster])
		}
	}
}

// serviceStream is one page's event stream of one service.
type serviceStream struct {
	s    *Server
	name string
	es   *eventStream
	last int64 // the client's Last-Event-ID

	prev []*registry.Instance // the instances last sent
	sent bool
	// parts are what the page knows of each cluster, by name.
	parts map[string]*partState
}

// partState is what a service page knows of one cluster beside its
// instances.
type partState struct {
	det    details
	canary registry.Canary     // the zero Canary: none
	policy registry.PolicyInfo // the zero PolicyInfo: none
	// history is the service's journal in the cluster as last read,
	// newest first.
	history []recordView
}

// publish sends snap to the page once it is loaded (or stale): "resumed" if
// it is the first event and the page has this revision already, "state"
// otherwise, with the changes since the last event. A console over
// several clusters never answers "resumed": the union's revision (a sum)
// does not name one state.
func (st *serviceStream) publish(ctx context.Context, snap registry.Snapshot) error {
	if !snap.Loaded && !snap.Stale() {
		return nil
	}
	defer func() { st.prev, st.sent = snap.Instances, true }()
	if !st.sent && st.last != 0 && snap.Revision == st.last && !snap.Stale() && !st.s.several() {
		return st.es.send("resumed", snap.Revision, resumed{Revision: snap.Revision})
	}
	// A cluster that does not answer keeps what was read of it; the
	// others are read at once, side by side.
	at := st.s.stateOf(st.name, snap)
	st.s.eachFresh(ctx, snap, func(ctx context.Context, p *part) {
		ps := st.parts[p.name]
		if !st.sent {
			ps.det = p.details(ctx, st.s, at)
		} else {
			// Leases are read again every leaseRefresh: a change reads
			// only which overrides exist.
			ps.det.overrides = p.overrides(ctx, st.s, at, ps.det.overrides)
		}
		// Every traced write changes what the page follows (an
		// override, an instance, the canary, the policy), so the
		// journal is read again with each event.
		ps.history = p.history(ctx, st.s.opts, st.name, ps.history)
	})
	v := st.s.newServiceView(snap, st.parts)
	if st.sent {
		v.Changes = diff(st.prev, snap.Instances, time.Now())
	}
	return st.es.send("state", snap.Revision, v)
}

// refreshLeases reads the leases again and sends when they run out, by
// instance key (instanceKey). Over stores without leases it sends
// nothing.
func (st *serviceStream) refreshLeases(ctx context.Context, snap registry.Snapshot) error {
	if !st.sent || !st.s.leased() {
		return nil
	}
	read := st.s.eachFresh(ctx, snap, func(ctx context.Context, p *part) {
		if p.leases != nil {
			st.parts[p.name].det.expires = p.leaseTimes(ctx, st.s.opts, st.name)
		}
	})
	if read == 0 {
		return nil
	}
	expires := map[string]time.Time{}
	for name, ps := range st.parts {
		for id, at := range ps.det.expires {
			expires[instanceKey(name, id)] = at
		}
	}
	// No id: the revision the page holds does not change.
	return st.es.send("leases", 0, expires)
}

// stateOf names the state snap of service holds, for the reads of
// overrides (which are in that state) that pages may share: none over
// several clusters or with legacy sources, whose revisions are made of
// several (a sum names no state), nor for a stale snapshot.
func (s *Server) stateOf(service string, snap registry.Snapshot) stateKey {
	at := stateKey{service: service}
	if !s.several() && len(s.opts.legacy) == 0 && snap.Loaded && !snap.Stale() {
		at.generation, at.revision = snap.Generation, snap.Revision
	}
	return at
}

// eachFresh calls read, side by side, for each cluster whose part of snap
// is not stale, and returns, when every call has, how many it made. Each
// call may change its cluster's state only.
func (s *Server) eachFresh(ctx context.Context, snap registry.Snapshot, read func(context.Context, *part)) int {
	var wg sync.WaitGroup
	n := 0
	for _, p := range s.parts {
		if partStale(snap, p.name) {
			continue
		}
		n++
		wg.Go(func() { read(ctx, p) })
	}
	wg.Wait()
	return n
}

// partStale reports whether the part of snap read from the cluster name
// ("" for a console's only one) is stale.
func partStale(snap registry.Snapshot, name string) bool {
	if name == "" {
		return snap.Stale()
	}
	for _, c := range snap.Clusters {
		if c.Cluster == name {
			return c.Stale()
		}
	}
	return false
}

// settingUpdate is a new canary setting or policy of a service in one
// cluster.
type settingUpdate struct {
	cluster string
	canary  *registry.Canary
	policy  *registry.PolicyInfo
}

func (u settingUpdate) apply(ps *partState) {
	if u.canary != nil {
		ps.canary = *u.canary
	}
	if u.policy != nil {
		ps.policy = *u.policy
	}
}

// followSettings follows service's canary setting and call policy in
// every cluster until ctx ends, sending each value read on the returned
// channel; wait, called once ctx has ended, waits for the goroutines that
// forward them.
func (s *Server) followSettings(ctx context.Context, service string) (updates <-chan settingUpdate, wait func()) {
	out := make(chan settingUpdate)
	var wg sync.WaitGroup
	for _, p := range s.parts {
		canaries := p.canaries.WatchCanary(ctx, service)
		wg.Go(func() {
			forward(ctx, canaries, out, func(c registry.Canary) settingUpdate { return settingUpdate{cluster: p.name, canary: &c} })
		})
		if p.policyInfos == nil {
			// A store that records no setter: the policy alone.
			policies := p.policies.WatchPolicy(ctx, service)
			wg.Go(func() {
				forward(ctx, policies, out, func(pol registry.Policy) settingUpdate {
					return settingUpdate{cluster: p.name, policy: &registry.PolicyInfo{Policy: pol}}
				})
			})
			continue
		}
		policies := p.policyInfos.WatchPolicyInfo(ctx, service)
		wg.Go(func() {
			forward(ctx, policies, out, func(pi registry.PolicyInfo) settingUpdate { return settingUpdate{cluster: p.name, policy: &pi} })
		})
	}
	return out, wg.Wait
}

// forward sends what in receives, wrapped, on out until in closes or ctx
// ends.
func forward[T any](ctx context.Context, in <-chan T, out chan<- settingUpdate, wrap func(T) settingUpdate) {
	for {
		select {
		case v, ok := <-in:
			if !ok {
				return
			}
			select {
			case out <- wrap(v):
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// streamContext is r's context, also ended by Close.
func (s *Server) streamContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// details reads which instances of service have an override and, from a
// store with leases, when their leases expire, by instance ID. It is best
// effort: what cannot be read is left out.
func (p *part) details(ctx context.Context, s *Server, at stateKey) details {
	return details{overrides: p.overrides(ctx, s, at, map[string]bool{}), expires: p.leaseTimes(ctx, s.opts, at.service)}
}

// leaseTimes reads when the leases of service's instances run out (at
// most maxLeaseLookups leases), by instance ID; none from a store without
// leases or that does not answer.
func (p *part) leaseTimes(ctx context.Context, o options, service string) map[string]time.Time {
	if p.leases == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
	defer cancel()
	expires, err := p.leases.LeaseExpiry(ctx, service, maxLeaseLookups)
	if err != nil {
		o.log.Debug("console: read leases", "service", service, "cluster", p.name, "error", err)
	}
	return expires
}

// leased reports whether some store the console reads holds instances by
// leases (etcd.LeaseReader).
func (s *Server) leased() bool {
	for _, p := range s.parts {
		if p.leases != nil {
			return true
		}
	}
	return false
}

// overrides lists the IDs of the instances that have an override in the
// state at of a service (read once for the pages of that state); if the
// registry does not answer it returns old. The map is shared: read only.
func (p *part) overrides(ctx context.Context, s *Server, at stateKey, old map[string]bool) map[string]bool {
	ids, err := p.overrideReads.do(ctx, s.ctx, at, s.opts.requestTimeout, func(ctx context.Context) (map[string]bool, error) {
		ovs, err := p.read.Overrides(ctx, at.service)
		if err != nil {
			return nil, err
		}
		out := make(map[string]bool, len(ovs))
		for id := range ovs {
			out[id] = true
		}
		return out, nil
	})
	if err != nil {
		s.opts.log.Debug("console: read overrides", "service", at.service, "cluster", p.name, "error", err)
		return old
	}
	return ids
}

// maxHistoryShown bounds the records of the journal a service page shows.
const maxHistoryShown = 20

// history reads the newest records of service's journal in the cluster;
// if the registry does not answer it returns old. A store that keeps no
// journal has none. (Each page reads it: a canary or policy write is
// journaled without changing the instances' revision, so a read is not
// named by a snapshot's state.)
func (p *part) history(ctx context.Context, o options, service string, old []recordView) []recordView {
	if p.journal == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
	defer cancel()
	recs, err := p.journal.History(ctx, service, maxHistoryShown)
	if err != nil {
		o.log.Debug("console: read the journal", "service", service, "cluster", p.name, "error", err)
		return old
	}
	out := make([]recordView, 0, len(recs))
	for _, r := range recs {
		rv := newRecordView(r)
		rv.Cluster = p.name
		out = append(out, rv)
	}
	return out
}
