package xds

import (
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/musterhq/muster/internal/xdscheck"
	"github.com/musterhq/muster/registry"
)

// userAgent returns how node names its xDS client: user_agent_name and
// user_agent_version, e.g. "gRPC Go 1.85.0"; empty if it names none.
func userAgent(node *corev3.Node) string {
	return strings.TrimSpace(node.GetUserAgentName() + " " + node.GetUserAgentVersion())
}

// routeForm is the form of a service's routes a client gets: its call
// policy as published, or without what the client's family misapplies.
// Every other resource is the same for every client.
type routeForm int

const (
	// formFull is the call policy as it is: grpc-go, grpc-java and any
	// client not named below.
	formFull routeForm = iota
	// formNoTimeout leaves out the policy's timeout, for the C-core
	// (gRPC C++, Python, Ruby, PHP; user agents "gRPC C-core <platform>"
	// with a language suffix or none): it ends a call 1 to 2 s before a
	// timeout that reaches it through the service config, the way a
	// route's max_stream_duration does (a call under a 300 ms timeout
	// ends after about 1 ms). Two clocks of the C-core start at different
	// points (src/core/lib/gprpp/time.cc:58, 68 at 1.51.1; the same code
	// at master, src/core/util/time.cc:58-73); grpc/grpc#34547 and #40633
	// are open. Without it, the callers' own deadlines apply, as before
	// the policy; its retries and every other part of the policy still
	// reach the client.
	formNoTimeout
	// formShortBackoff sends each retry backoff of 1 s or more as
	// maxShortBackoff, for grpc-js-xds (user agent "gRPC Node Pure JS"):
	// it reads a backoff as its seconds (a string) followed by its
	// fraction of a second, so 1 s becomes 10 s and 2.5 s 20.5 s
	// (protoDurationToSecondsString in src/resolver-xds.ts, 1.10.1 to
	// 1.14.1). Backoffs under 1 s it reads right.
	formShortBackoff
	numRouteForms
)

// maxShortBackoff is the longest backoff grpc-js-xds reads right.
const maxShortBackoff = time.Second - time.Millisecond

// formOf returns the route form of node's client.
func formOf(node *corev3.Node) routeForm {
	switch name := node.GetUserAgentName(); {
	case strings.HasPrefix(name, "gRPC C-core"):
		return formNoTimeout
	case name == "gRPC Node Pure JS":
		return formShortBackoff
	}
	return formFull
}

// apply returns call as the clients of form f get it.
func (f routeForm) apply(call registry.Policy) registry.Policy {
	switch f {
	case formNoTimeout:
		call.Timeout = 0
	case formShortBackoff:
		call.Retry.BackoffBase = min(call.Retry.BackoffBase, maxShortBackoff)
		call.Retry.BackoffMax = min(call.Retry.BackoffMax, maxShortBackoff)
	}
	return call
}

// audience returns the client families that get the routes of form f,
// whose preconditions those routes must meet.
func (f routeForm) audience() xdscheck.Family {
	switch f {
	case formNoTimeout:
		return xdscheck.CCore
	case formShortBackoff:
		return xdscheck.GRPCJS
	}
	return xdscheck.GRPCGo | xdscheck.GRPCJava
}
