package console

import (
	"context"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
// revision.
func (s *Server) handleServiceEvents(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if err := registry.ValidateName(name); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, stop := s.streamContext(r)
	defer stop()
	wt, err := s.d.Watch(ctx, name)
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer wt.Close()
	es, err := startStream(w)
	if err != nil {
		return
	}
	last := lastEventID(r)
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	leaseTick := time.NewTicker(leaseRefresh)
	defer leaseTick.Stop()
	var (
		prev []*registry.Instance
		sent bool
		det  details
	)
	for {
		snap := wt.Snapshot()
		if snap.Loaded || snap.Stale() {
			var err error
			if !sent && last != 0 && snap.Revision == last && !snap.Stale() {
				err = es.send("resumed", snap.Revision, resumed{Revision: snap.Revision})
			} else {
				switch {
				case snap.Stale():
					// etcd does not answer; keep what was read.
				case !sent:
					det = s.details(ctx, name)
				default:
					// Leases are read again every leaseRefresh:
					// a change reads only which overrides exist.
					det.overrides = s.overrides(ctx, name, det.overrides)
				}
				v := newServiceView(snap, det)
				if sent {
					v.Changes = diff(prev, snap.Instances, time.Now())
				}
				err = es.send("state", snap.Revision, v)
			}
			if err != nil {
				return
			}
			prev, sent = snap.Instances, true
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
			if !sent || wt.Snapshot().Stale() {
				continue
			}
			det = s.details(ctx, name)
			// No id: the revision the page holds does not change.
			if es.send("leases", 0, det.expires) != nil {
				return
			}
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
