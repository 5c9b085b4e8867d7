package xds_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pythonBin is Debian's Python, which python3-grpcio installs grpc for
// (a python3 earlier on PATH, e.g. a pyenv shim, would not see it).
const pythonBin = "/usr/bin/python3"

// requirePythonClient returns the Python client's path once pythonBin
// imports grpc. Without it the test is skipped with the command that
// installs it, except under CI (CI=true), where it fails: CI installs
// python3-grpcio before go test.
func requirePythonClient(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(pythonBin, "-c", "import grpc; print(grpc.__version__)").CombinedOutput()
	if err != nil {
		msg := "the Python xDS client test needs " + pythonBin + " with grpc (" + strings.TrimSpace(string(out)) +
			"); install it with\n\tapt-get install -y --no-install-recommends python3-grpcio"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Logf("%s: grpcio %s", pythonBin, strings.TrimSpace(string(out)))
	client, err := filepath.Abs("testdata/pyclient/client.py")
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// A Python client (Debian's python3-grpcio, the C-core's xDS support, no
// Muster code) calling xds:///greeter follows a register, a drain and a
// deregister, with no failed call once it has been served, and the control
// plane records no NACK from it.
func TestPythonClient(t *testing.T) {
	client := requirePythonClient(t)
	testClientFollows(t, startPythonClient(client))
}

// The Python client (grpcio 1.51, no muster_p2c) takes the round-robin
// fallback of a MusterP2C cluster, as the Node client does.
func TestPythonClientMusterPolicy(t *testing.T) {
	client := requirePythonClient(t)
	testClientFallback(t, startPythonClient(client))
}

// startPythonClient returns a function that runs client.py against the
// control plane at addr and stops it at the test's end.
func startPythonClient(client string) func(t *testing.T, addr string) *childClient {
	return func(t *testing.T, addr string) *childClient {
		t.Helper()
		cmd := exec.Command(pythonBin, client, "xds:///greeter", "5")
		return startChild(t, "the Python client", cmd, addr, "python-client")
	}
}
