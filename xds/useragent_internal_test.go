package xds

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/musterhq/muster/registry"
)

// The user agents are those the matrix's clients send (TestClientMatrix),
// and the C-core's other wrappers (the suffix is a define of each
// wrapper's build: " RUBY" for the gem, " PHP", none for C++ and for
// Debian's ruby-grpc): every C-core client is denied the call policy's
// timeout, every grpc-js-xds client gets its backoffs under 1 s.
func TestRouteFormOf(t *testing.T) {
	for _, tc := range []struct {
		name, version, want string
		form                routeForm
	}{
		{"gRPC Go", "1.85.0", "gRPC Go 1.85.0", formFull},
		{"gRPC Go", "1.60.1", "gRPC Go 1.60.1", formFull},
		{"gRPC Java", "1.57.2", "gRPC Java 1.57.2", formFull},
		{"gRPC Node Pure JS", "1.14.1", "gRPC Node Pure JS 1.14.1", formShortBackoff},
		{"gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1", "gRPC C-core linux Python C-core 29.0.0 Python 1.51.1", formNoTimeout},
		{"gRPC C-core macos Python", "C-core 50.0.0 Python 1.74.0", "gRPC C-core macos Python C-core 50.0.0 Python 1.74.0", formNoTimeout},
		{"gRPC C-core linux", "C-core 29.0.0", "gRPC C-core linux C-core 29.0.0", formNoTimeout}, // C++, Debian's ruby-grpc
		{"gRPC C-core linux RUBY", "C-core 29.0.0 RUBY", "gRPC C-core linux RUBY C-core 29.0.0 RUBY", formNoTimeout},
		{"gRPC C-core linux PHP", "C-core 29.0.0 PHP", "gRPC C-core linux PHP C-core 29.0.0 PHP", formNoTimeout},
		{"", "", "", formFull},
	} {
		node := &corev3.Node{UserAgentName: tc.name, UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: tc.version}}
		if got := userAgent(node); got != tc.want {
			t.Errorf("userAgent(%q, %q) = %q, want %q", tc.name, tc.version, got, tc.want)
		}
		if got := formOf(node); got != tc.form {
			t.Errorf("formOf(%q) = %v, want %v", tc.name, got, tc.form)
		}
	}
	if userAgent(nil) != "" || formOf(nil) != formFull {
		t.Errorf("a request without a node: want no user agent, the full form")
	}
}

// Each form changes only what its clients misapply.
func TestRouteFormApply(t *testing.T) {
	p := registry.Policy{Timeout: 2 * time.Second, Retry: registry.RetryPolicy{MaxAttempts: 3, Codes: []string{"UNAVAILABLE"},
		BackoffBase: 100 * time.Millisecond, BackoffMax: 5 * time.Second}}
	if got := formFull.apply(p); !samePolicy(got, p) {
		t.Errorf("full: %+v, want the policy as it is", got)
	}
	untimed := p
	untimed.Timeout = 0
	if got := formNoTimeout.apply(p); !samePolicy(got, untimed) {
		t.Errorf("no timeout: %+v, want %+v", got, untimed)
	}
	short := p
	short.Retry.BackoffMax = maxShortBackoff
	if got := formShortBackoff.apply(p); !samePolicy(got, short) {
		t.Errorf("short backoff: %+v, want %+v", got, short)
	}
	p.Retry.BackoffBase, p.Retry.BackoffMax = 10*time.Millisecond, 500*time.Millisecond
	if got := formShortBackoff.apply(p); !samePolicy(got, p) {
		t.Errorf("short backoff of backoffs under 1 s: %+v, want them as they are", got)
	}
}
