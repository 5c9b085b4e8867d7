package fleet_test

import (
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	runRoleIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// The fleet's parameters. Lists (processes, ttl) are swept: one
// sub-benchmark per combination.
var (
	flagMembers   = flag.Int("fleet.members", 1, "etcd members in each cluster (1 or 3)")
	flagRegions   = flag.Int("fleet.regions", 1, "regions, each an etcd cluster of its own with its share of the registrar processes; clients and the control plane follow all (registry/clusters)")
	flagProcesses = flag.String("fleet.processes", "200", "registrar processes (one lease each), a comma-separated list to sweep")
	flagHosts     = flag.Int("fleet.hosts", 2, "child processes the registrar processes are spread over (each simulated process has its own etcd client, connection and lease)")
	flagInstances = flag.Int("fleet.instances", 5, "instances per registrar process")
	flagServices  = flag.Int("fleet.services", 20, "services in the registry")
	flagSpread    = flag.Int("fleet.spread", 1, "services each registrar process has instances in (its registrar watches each one's keys)")
	flagTTL       = flag.String("fleet.ttl", "10s", "lease TTL of every registrar, a comma-separated list to sweep")
	flagFollowed  = flag.Int("fleet.followed", 4, "services followed by the clients and rolled by the churn (the first ones)")
	flagChannels  = flag.Int("fleet.channels", 8, "muster:/// channels (resolver + muster_p2c) in the client process, spread over the followed services")
	flagNaming    = flag.Int("fleet.naming", 8, "etcd:/// channels of etcd's naming resolver in the client process (0: none, and no etcd-naming copy is written)")
	flagStreams   = flag.Int("fleet.streams", 20, "ADS streams (each on its own connection) to the muster xds process, spread over the followed services")
	flagChurn     = flag.Float64("fleet.churn", 10, "changes per second made by the churn driver (register, weight, drain, deregister in turn)")
	flagQuiet     = flag.Duration("fleet.quiet", 10*time.Second, "window measured before the churn: renewals only")
	flagDuration  = flag.Duration("fleet.duration", 30*time.Second, "window measured under churn")
	flagSetup     = flag.Duration("fleet.setup", 15*time.Minute, "bound on each phase of the setup (registering the fleet, loading every channel and stream)")
)

// quiet discards the library's logs; the benchmark reports what it sees.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
