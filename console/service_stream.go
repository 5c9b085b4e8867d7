package console

import (
	"context"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
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
// revision.
func (s *Server) handleServiceEvents(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if err := registry.ValidateName(name); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch ok, err := s.listed(r, name); {
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
	st := &serviceStream{s: s, name: name, es: es, last: lastEventID(r)}
	// The canary setting, followed as clients follow it; each value
	// (the first read too, which may differ from what a resumed page
	// holds) is sent with the instances.
	canaries := s.canaries.WatchCanary(ctx, name)
	policies := s.policies.WatchPolicyInfo(ctx, name)
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
		case c, ok := <-canaries:
			if !ok {
				return
			}
			st.canary = c
		case p, ok := <-policies:
			if !ok {
				return
			}
			st.policy = p
		}
	}
}

// serviceStream is one page's event stream of one service.
type serviceStream struct {
	s    *Server
	name string
	es   *eventStream
	last int64 // the client's Last-Event-ID

	prev   []*registry.Instance // the instances last sent
	sent   bool
	det    details
	canary registry.Canary     // the zero Canary: none
	policy registry.PolicyInfo // the zero PolicyInfo: none
	// history is the service's journal as last read, newest first.
	history []recordView
}

// publish sends snap to the page once it is loaded (or stale): "resumed" if
// it is the first event and the page has this revision already, "state"
// otherwise, with the changes since the last event.
func (st *serviceStream) publish(ctx context.Context, snap registry.Snapshot) error {
	if !snap.Loaded && !snap.Stale() {
		return nil
	}
	defer func() { st.prev, st.sent = snap.Instances, true }()
	if !st.sent && st.last != 0 && snap.Revision == st.last && !snap.Stale() {
		return st.es.send("resumed", snap.Revision, resumed{Revision: snap.Revision})
	}
	switch {
	case snap.Stale():
		// etcd does not answer; keep what was read.
	case !st.sent:
		st.det = st.s.details(ctx, st.name)
	default:
		// Leases are read again every leaseRefresh: a change reads only
		// which overrides exist.
		st.det.overrides = st.s.overrides(ctx, st.name, st.det.overrides)
	}
	if !snap.Stale() {
		// Every traced write changes what the page follows (an override,
		// an instance, the canary, the policy), so the journal is read
		// again with each event.
		st.history = st.s.history(ctx, st.name, st.history)
	}
	v := newServiceView(snap, st.det, st.canary, st.policy)
	v.History = st.history
	if st.sent {
		v.Changes = diff(st.prev, snap.Instances, time.Now())
	}
	return st.es.send("state", snap.Revision, v)
}

// refreshLeases reads the leases again and sends when they run out.
func (st *serviceStream) refreshLeases(ctx context.Context, snap registry.Snapshot) error {
	if !st.sent || snap.Stale() {
		return nil
	}
	st.det = st.s.details(ctx, st.name)
	// No id: the revision the page holds does not change.
	return st.es.send("leases", 0, st.det.expires)
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

// details reads which instances of service have an override and when
// their leases expire. It is best effort: what cannot be read is left out.
func (s *Server) details(ctx context.Context, service string) details {
	det := details{overrides: map[string]bool{}, leases: map[int64][]string{}}
	ctx, cancel := context.WithTimeout(ctx, s.opts.requestTimeout)
	defer cancel()
	// Not WithKeysOnly: etcd 3.7 then reads keys from its index alone,
	// without their leases.
	resp, err := s.cli.Get(ctx, registry.ServicePrefix(s.opts.prefix, service), clientv3.WithPrefix())
	if err != nil {
		s.opts.log.Debug("console: read service keys", "service", service, "error", err)
		return det
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if id, ok := overrideID(s.opts.prefix, key); ok {
			det.overrides[id] = true
			continue
		}
		if _, id, err := registry.ParseKey(s.opts.prefix, key); err == nil && kv.Lease != 0 {
			det.leases[kv.Lease] = append(det.leases[kv.Lease], id)
		}
	}
	det.expires = s.leaseExpiry(ctx, det.leases)
	return det
}

// overrides lists the IDs of service's instances that have an override,
// reading keys only; if etcd does not answer it returns old.
func (s *Server) overrides(ctx context.Context, service string, old map[string]bool) map[string]bool {
	ctx, cancel := context.WithTimeout(ctx, s.opts.requestTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, registry.ServicePrefix(s.opts.prefix, service), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		s.opts.log.Debug("console: read service keys", "service", service, "error", err)
		return old
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		if id, ok := overrideID(s.opts.prefix, string(kv.Key)); ok {
			out[id] = true
		}
	}
	return out
}

// maxHistoryShown bounds the records of the journal a service page shows.
const maxHistoryShown = 20

// history reads the newest records of service's journal; if etcd does not
// answer it returns old.
func (s *Server) history(ctx context.Context, service string, old []recordView) []recordView {
	recs, err := etcd.History(ctx, s.cli, service, maxHistoryShown, etcd.WithPrefix(s.opts.prefix), etcd.WithRequestTimeout(s.opts.requestTimeout))
	if err != nil {
		s.opts.log.Debug("console: read the journal", "service", service, "error", err)
		return old
	}
	out := make([]recordView, 0, len(recs))
	for _, r := range recs {
		out = append(out, newRecordView(r))
	}
	return out
}

// overrideID returns the instance ID of an override key.
func overrideID(prefix, key string) (string, bool) {
	target, ok := registry.ParseOverrideKey(prefix, key)
	if !ok {
		return "", false
	}
	_, id, err := registry.ParseKey(prefix, target)
	return id, err == nil
}

// leaseExpiry reads when each lease runs out unless renewed (at most
// maxLeaseLookups of them) and returns it per instance ID.
func (s *Server) leaseExpiry(ctx context.Context, leases map[int64][]string) map[string]time.Time {
	ctx, cancel := context.WithTimeout(ctx, s.opts.requestTimeout)
	defer cancel()
	out := map[string]time.Time{}
	n := 0
	for lease, ids := range leases {
		if n++; n > maxLeaseLookups {
			break
		}
		ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err != nil || ttl.TTL < 0 {
			continue
		}
		at := time.Now().Add(time.Duration(ttl.TTL) * time.Second)
		for _, id := range ids {
			out[id] = at
		}
	}
	return out
}
