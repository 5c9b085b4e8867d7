package xds_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// nodeClientDir holds the Node.js client and its package-lock.json; CI runs
// npm ci there before go test, and the test runs it itself when the packages
// are missing.
const nodeClientDir = "testdata/nodeclient"

// requireNodeClient returns the node binary and the client's directory,
// installing the client's pinned packages with npm ci if they are missing.
// It fails the test (never skips it), with the command to run, when Node
// is missing or npm ci fails.
func requireNodeClient(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (Node.js 18 or later) is not on PATH: %v; the Node xDS client test needs it", err)
	}
	if dir, err = filepath.Abs(nodeClientDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		// A fresh clone: install the pinned packages (package-lock.json)
		// once, as .ci/run does, so that the README's test command works.
		t.Logf("installing the Node client's packages: npm ci --prefix %s", dir)
		out, err := exec.Command("npm", "ci", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("the Node client's packages are not installed and npm ci failed (%v):\n%s\nrun\n\tnpm ci --prefix %s", err, out, dir)
		}
	}
	return node, dir
}

// startNodeClient runs client.js against the control plane at addr with
// node id nodeID, and stops it at the test's end. It fails the test,
// naming the npm command, when the client's dependencies are not installed.
func startNodeClient(t *testing.T, addr, nodeID string) *childClient {
	t.Helper()
	return startNodeClientColored(t, addr, nodeID, "")
}

// startNodeClientColored is startNodeClient with every call carrying the
// color c in its x-muster-color header (none if c is empty).
func startNodeClientColored(t *testing.T, addr, nodeID, c string) *childClient {
	t.Helper()
	node, dir := requireNodeClient(t)
	cmd := exec.Command(node, filepath.Join(dir, "client.js"), "xds:///greeter", "5", c)
	cmd.Dir = dir
	return startChild(t, "the Node client", cmd, addr, nodeID)
}

// A Node.js client (@grpc/grpc-js + @grpc/grpc-js-xds, no Muster code)
// calling xds:///greeter follows a register, a drain and a deregister, with
// no failed call once it has been served, and the control plane records no
// NACK from it.
func TestNodeClient(t *testing.T) {
	requireNodeClient(t)
	testClientFollows(t, func(t *testing.T, addr string) *childClient {
		return startNodeClient(t, addr, "node-client")
	})
}

// The Node client, which has no muster_p2c, takes the round-robin fallback
// of a MusterP2C cluster: it accepts the cluster (no NACK) and calls every
// instance.
func TestNodeClientMusterPolicy(t *testing.T) {
	requireNodeClient(t)
	testClientFallback(t, func(t *testing.T, addr string) *childClient {
		return startNodeClient(t, addr, "node-client")
	})
}
