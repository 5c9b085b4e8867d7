package console

import (
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// fleetMemory is what the services pages knew of each service when their
// last run ended: a run follows the fleet only while a page is open (see
// fleetHub), and without it the next run (a page reopened, or one came
// back from a service's page) would know no change and date the last one
// at the newest registration, older than a removal or a drain it had
// shown. A run takes a service's last change from here when the service
// is as it was remembered; a service that differs changed while no page
// was open, and is dated when a run sees it again.
//
// fleetMemory is safe for concurrent use: a run that is ending and the
// next one may use it at once.
type fleetMemory struct {
	mu       sync.Mutex
	services map[string]remembered
}

// remembered is one service in a fleetMemory.
type remembered struct {
	instances  []*registry.Instance // shared and immutable, as in a Snapshot
	lastChange time.Time
}

func newFleetMemory() *fleetMemory {
	return &fleetMemory{services: map[string]remembered{}}
}

// recall returns the last change of service if its instances are still
// those remembered (compared by value: a new watch may hold other
// pointers), else now when one was remembered, else the zero time.
func (m *fleetMemory) recall(service string, instances []*registry.Instance, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.services[service]
	switch {
	case !ok:
		return time.Time{}
	case registry.EqualInstances(r.instances, instances):
		return r.lastChange
	default:
		return now
	}
}

// keep remembers service's instances and last change.
func (m *fleetMemory) keep(service string, instances []*registry.Instance, lastChange time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.services[service] = remembered{instances: instances, lastChange: lastChange}
}

// forget drops the services not in keep, so that the memory holds no
// more than the fleet.
func (m *fleetMemory) forget(keep map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.services {
		if !keep[name] {
			delete(m.services, name)
		}
	}
}
