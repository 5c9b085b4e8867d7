package served

import (
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster/registry"
)

// Defaults of a Config.
const (
	DefaultFirstState      = 500 * time.Millisecond
	DefaultProtectFraction = 0.5
	DefaultProtectWindow   = 30 * time.Second
	DefaultDeletionGrace   = 3 * time.Second
)

// Config is what a Pipeline applies to every list it serves. The resolver's
// and the xDS control plane's options set it; Defaults gives the values
// their documentation states.
type Config struct {
	// ZoneFallback says what a target with a zone or a region keeps:
	// every instance that passes its other filters (true; the consumer
	// prefers the near ones), or only those of the zone, or of the region
	// for a target with no zone (false).
	ZoneFallback bool
	// FirstState bounds how long a new follower waits for the first load
	// of its service, and for its settings, before its consumer is told
	// (Consumer.Fail) or served without them.
	FirstState time.Duration
	// ProtectFraction and ProtectWindow configure empty-list protection
	// (protector); a fraction of 0 disables it.
	ProtectFraction float64
	ProtectWindow   time.Duration
	// DeletionGrace is how long an instance that left the registry while
	// served is still served (grace); 0 disables it.
	DeletionGrace time.Duration
	// SnapshotDir, when set, keeps each service's last good list on disk,
	// and starts a follower from it while the registry has not answered.
	SnapshotDir string
	// SubsetSize, when positive, keeps at most that many instances of a
	// target, chosen by rendezvous hashing on ClientID.
	SubsetSize int
	ClientID   string
	// Canaries and Policies, when set, are followed once per service and
	// carried on every List.
	Canaries registry.CanarySource
	Policies registry.PolicySource
	// Logger receives the pipeline's warnings, with the service named.
	Logger *slog.Logger
	// Build, when set, makes a consumer's form of each chosen list (gRPC
	// endpoints, say) once per target, however many followers serve it:
	// Chosen.Built. prev is the target's previous chosen list, nil for
	// the first; Build may reuse what it built for prev's unchanged
	// instances, which are the same pointers. It is called under the
	// target's lock and must not block.
	Build func(list []*registry.Instance, prev *Chosen) any
	// Clock reads the time protection and the grace decide by; nil is the
	// real clock. Tests set another.
	Clock Clock
}

// Defaults returns the Config of documented defaults: zone fallback on,
// protection of half the list over 30 s, a 3 s deletion grace, the first
// state within 500 ms, no subsetting, no settings, ClientID
// "<hostname>:<pid>".
func Defaults() Config {
	host, _ := os.Hostname()
	return Config{
		ZoneFallback:    true,
		FirstState:      DefaultFirstState,
		ProtectFraction: DefaultProtectFraction,
		ProtectWindow:   DefaultProtectWindow,
		DeletionGrace:   DefaultDeletionGrace,
		ClientID:        fmt.Sprintf("%s:%d", host, os.Getpid()),
		Logger:          slog.Default(),
	}
}

// Consumer is what a Pipeline serves: a gRPC channel, a service of the xDS
// control plane. Its methods are called one at a time for one follower,
// from the pipeline's goroutines, and never after Follower.Close returned;
// they should return promptly, since the target's other followers wait
// meanwhile.
type Consumer interface {
	// Serve hands the list the consumer serves now: after a change of the
	// registry, of the service's settings, or a protection's lift or a
	// hold's end. An unchanged list is not handed again but with new
	// settings.
	Serve(List)
	// Fail says that nothing is known of the service yet: its first load
	// failed, or took longer than Config.FirstState. A list served later
	// ends it.
	Fail(error)
}

// List is what a follower serves: the chosen instances, shared by every
// follower of the target that serves the same list, with the service's
// settings.
type List struct {
	*Chosen
	// Canary and Policy are the service's settings as last read; zero
	// without Config.Canaries and Config.Policies.
	Canary registry.Canary
	Policy registry.Policy
	// Settings counts the changes of Canary and Policy the follower has
	// seen: a consumer that derives something from them makes it again
	// when it moves.
	Settings uint64
	// Why says, when Instances is empty, why: the service, where it was
	// looked up, and what the registry said.
	Why string
}

// Chosen is one served list after the target's filters and subsetting. It
// is never written once made, and followers of a target serving the same
// list are handed the same one.
type Chosen struct {
	// From is the served list it was chosen from.
	From []*registry.Instance
	// Instances are the chosen instances, sorted by ID.
	Instances []*registry.Instance
	// Built is Config.Build's result for Instances; nil without Build.
	Built any
}

// Stats are a Pipeline's counters.
type Stats struct {
	// Updates counts lists served.
	Updates uint64
	// Protected counts changes withheld by empty-list protection.
	Protected uint64
	// Held counts instances held for the deletion grace.
	Held uint64
}

// Pipeline follows services of one Discovery for any number of consumers:
// per target (service and filters) one watcher and one goroutine, which
// hands each change to the target's followers; per service one follower of
// its settings. It is safe for concurrent use.
type Pipeline struct {
	d        registry.Discovery
	cfg      Config
	snaps    *snapshotStore
	states   sharedStates
	settings settingsHub

	updates   atomic.Uint64
	protected atomic.Uint64
	held      atomic.Uint64
}

// New returns a Pipeline over d, which stays the caller's and must outlive
// every follower. A nil Logger or Clock in cfg is the default one.
func New(d registry.Discovery, cfg Config) *Pipeline {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	p := &Pipeline{d: d, cfg: cfg}
	if cfg.SnapshotDir != "" {
		p.snaps = &snapshotStore{dir: cfg.SnapshotDir, written: map[string]savedList{}}
	}
	return p
}

// Stats returns the Pipeline's counters.
func (p *Pipeline) Stats() Stats {
	return Stats{Updates: p.updates.Load(), Protected: p.protected.Load(), Held: p.held.Load()}
}
