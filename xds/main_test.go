package xds_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(controlPlaneEnv); spec != "" {
		// A child of TestSeveralControlPlanes: a control plane, no tests.
		os.Exit(runControlPlane(spec))
	}
	if spec := os.Getenv(clientsEnv); spec != "" {
		// A child of startClients: ADS clients, no tests.
		os.Exit(runClients(spec))
	}
	goleak.VerifyTestMain(m, append(etcdtest.LeakOptions(),
		// The floor's Go client is built once per test binary.
		goleak.Cleanup(func(int) { removeGoFloorClient() }),
		// grpc-go v1.85 builds a file watcher (pemfile) for the "tls"
		// channel credentials of a bootstrap with certificate files and
		// leaves it running after the xDS client and its channel are
		// closed (measured: one watcher per channel, still there a second
		// after Close; it re-reads the files every 10 minutes). Only
		// TestTLS's clients have such a bootstrap; no caller can stop it.
		goleak.IgnoreAnyFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"),
	)...)
}
