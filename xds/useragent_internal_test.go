package xds

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// The user agents are those the matrix's clients send (TestClientMatrix):
// only gRPC Python's is denied the call policy's timeout.
func TestWithholdsTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, version, want string
		withheld            bool
	}{
		{"gRPC Go", "1.85.0", "gRPC Go 1.85.0", false},
		{"gRPC Go", "1.60.1", "gRPC Go 1.60.1", false},
		{"gRPC Node Pure JS", "1.14.1", "gRPC Node Pure JS 1.14.1", false},
		{"gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1", "gRPC C-core linux Python C-core 29.0.0 Python 1.51.1", true},
		{"gRPC C-core macos Python", "C-core 50.0.0 Python 1.74.0", "gRPC C-core macos Python C-core 50.0.0 Python 1.74.0", true},
		{"gRPC C-core linux", "C-core 29.0.0", "gRPC C-core linux C-core 29.0.0", false}, // C++
		{"", "", "", false},
	} {
		node := &corev3.Node{UserAgentName: tc.name, UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: tc.version}}
		if got := userAgent(node); got != tc.want {
			t.Errorf("userAgent(%q, %q) = %q, want %q", tc.name, tc.version, got, tc.want)
		}
		if got := withholdsTimeout(node); got != tc.withheld {
			t.Errorf("withholdsTimeout(%q) = %v, want %v", tc.name, got, tc.withheld)
		}
	}
	if userAgent(nil) != "" || withholdsTimeout(nil) {
		t.Errorf("a request without a node: want no user agent, the timeout kept")
	}
}
