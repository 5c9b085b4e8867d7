package xds

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// userAgent returns how node names its xDS client: user_agent_name and
// user_agent_version, e.g. "gRPC Go 1.85.0"; empty if it names none.
func userAgent(node *corev3.Node) string {
	return strings.TrimSpace(node.GetUserAgentName() + " " + node.GetUserAgentVersion())
}

// withholdsTimeout reports whether node's client gets its routes without
// the call policy's timeout: gRPC Python (grpcio, on the C-core, which
// names itself "gRPC C-core <platform> Python") ends calls long before a
// timeout that reaches it through the service config, the way xDS routes'
// max_stream_duration does: after about 1 ms for 300 ms with grpcio
// 1.51.1, and grpc/grpc#34547 (1.54) and #40633 (1.74) are open. A call
// policy's timeout would fail every call of such a client; without it,
// its callers' own deadlines apply, as before the policy. Its retries and
// every other part of the policy still reach it.
func withholdsTimeout(node *corev3.Node) bool {
	name := node.GetUserAgentName()
	return strings.HasPrefix(name, "gRPC C-core") && strings.HasSuffix(name, " Python")
}
