package xds_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The Node.js clients: testdata/nodeclient/client.js with the packages of
// testdata/nodeclient (the newest @grpc/grpc-js-xds) or of
// testdata/nodeclient-floor (the oldest Muster supports), each pinned by
// its package-lock.json. CI runs npm ci in both before go test; a test runs
// it itself when the packages are missing.
const (
	nodeClientDir      = "testdata/nodeclient"
	nodeClientFloorDir = "testdata/nodeclient-floor"
)

// requireNodePackages returns the node binary and the absolute path of
// dir, installing dir's pinned packages with npm ci if they are missing. It
// fails the test (never skips it), with the command to run, when Node is
// missing or npm ci fails.
func requireNodePackages(t testing.TB, dir string) (node, abs string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (Node.js 18 or later) is not on PATH: %v; the Node xDS client tests need it", err)
	}
	if abs, err = filepath.Abs(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		// A fresh clone: install the pinned packages (package-lock.json)
		// once, as .ci/run does, so that the README's test command works.
		t.Logf("installing the Node client's packages: npm ci --prefix %s", abs)
		out, err := exec.Command("npm", "ci", "--prefix", abs, "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("the Node client's packages are not installed and npm ci failed (%v):\n%s\nrun\n\tnpm ci --prefix %s", err, out, abs)
		}
	}
	return node, abs
}

// nodeClient returns the start function of client.js with the packages of
// dir.
func nodeClient(dir string) func(t testing.TB, boot string, every time.Duration, md []string) *childClient {
	return func(t testing.TB, boot string, every time.Duration, md []string) *childClient {
		t.Helper()
		node, script := requireNodePackages(t, nodeClientDir)
		_, pkgs := requireNodePackages(t, dir)
		cmd := exec.Command(node, append([]string{filepath.Join(script, "client.js"), "xds:///greeter", millis(every)}, md...)...)
		cmd.Dir = pkgs
		cmd.Env = append(cmd.Env, "XDS_CLIENT_PACKAGES="+pkgs)
		return startChild(t, "the Node client", cmd, boot)
	}
}
