package xds_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pythonBin is Debian's Python, which python3-grpcio installs grpc for
// (a python3 earlier on PATH, e.g. a pyenv shim, would not see it).
const pythonBin = "/usr/bin/python3"

// requirePythonClient returns the Python client's path once pythonBin
// imports grpc. Without it the test is skipped with the command that
// installs it, except under CI (CI=true), where it fails: CI installs
// python3-grpcio before go test.
func requirePythonClient(t testing.TB) string {
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
	client, err := filepath.Abs("testdata/pyclient/client.py")
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// pythonClient runs client.py (Debian's python3-grpcio, the C-core's xDS
// support, no Muster code) with the bootstrap boot and metadata md.
func pythonClient(t testing.TB, boot string, every time.Duration, md []string) *childClient {
	t.Helper()
	client := requirePythonClient(t)
	cmd := exec.Command(pythonBin, append([]string{client, "xds:///greeter", millis(every)}, md...)...)
	return startChild(t, "the Python client", cmd, boot)
}
