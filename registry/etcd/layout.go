package etcd

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/musterhq/muster/registry"
)

// Layout is how a Discovery finds and reads the keys of services written in
// another layout than Muster's: by other frameworks on the same etcd
// (WithLayout). Only the keys and their values change; loading, the shared
// watch, the cache, staleness, rewinds and the skipping of bad values are
// the Discovery's own.
//
// A Layout is pure (no I/O) and safe for concurrent use; the Discovery
// calls it from the goroutine of each service.
type Layout interface {
	// Prefix returns the prefix of every key of service, normally ending
	// in "/" so that no other service's key starts with it. A Discovery
	// reads and watches exactly the keys under it.
	Prefix(service string) string
	// Decode returns the instance of service described by the key
	// Prefix(service)+suffix holding value. The instance's Name must be
	// service, and its ID a function of suffix alone, distinct for
	// distinct suffixes (sort order and updates rely on it). An error
	// makes the value bad: it is skipped, logged and counted, and the
	// other keys are served. A key to leave out silently (another
	// service's key under a shared prefix) returns ErrNotInstance.
	Decode(service, suffix string, value []byte) (registry.Instance, error)
}

// ErrNotInstance is returned by Layout.Decode for a key that does not
// describe an instance of the service and is left out without counting it
// as a bad value.
var ErrNotInstance = errors.New("etcd: not an instance of the service")

// WithLayout makes a Discovery read services in layout instead of
// Muster's: the keys of service are those under layout.Prefix(service)
// (WithPrefix is not used) and each value is read by layout.Decode; there
// are no operators' overrides. Services, which lists Muster's layout, is an
// error. The default is Muster's layout; a nil layout is an error.
// NewDiscovery, Open and NewStore take it (a Store's Registrar writes
// Muster's layout: WithMirror writes others).
func WithLayout(layout Layout) DiscoveryOption {
	return discoveryOnly{func(o *options) {
		if layout == nil {
			o.invalid("WithLayout(nil): the layout must not be nil")
			return
		}
		o.layout = layout
	}}
}

// decodeLayout turns a key-value into an instance through the cache's
// layout, or appends it to bad if it is bad and not reported yet. A key the
// layout leaves out is neither.
func (c *cache) decodeLayout(kv *mvccpb.KeyValue, bad []badValue) (registry.Instance, bool, []badValue) {
	key := string(kv.Key)
	if len(key) <= len(c.service) || key[:len(c.service)] != c.service {
		return registry.Instance{}, false, bad
	}
	in, err := c.layout.Decode(c.name, key[len(c.service):], kv.Value)
	if errors.Is(err, ErrNotInstance) {
		return registry.Instance{}, false, bad
	}
	if err == nil && in.ID == "" {
		err = errors.New("the layout gave no instance ID")
	}
	if err == nil {
		in = in.Normalize()
		err = in.Validate()
		if err == nil && in.Name != c.name {
			err = fmt.Errorf("the layout named service %q, not %q", in.Name, c.name)
		}
	}
	if err != nil {
		return registry.Instance{}, false, c.skip(kv, err, bad)
	}
	return in, true, bad
}
