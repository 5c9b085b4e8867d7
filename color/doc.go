// Package color carries the color of a call for blue-green and canary
// releases: the version of the services a request should reach where one
// is deployed.
//
// A call's color travels as the gRPC metadata header "x-muster-color"
// (Header). WithColor sets it on an outgoing context; FromContext reads
// it back, as Muster's balancers do on every pick; the server
// interceptors (UnaryServerInterceptor, StreamServerInterceptor) copy the
// color of an incoming call to the handler's context, so that the calls
// the handler makes carry it on to the next service.
//
// An instance's color is a metadata entry of its registry.Instance (key
// DefaultInstanceKey, "color", unless the balancer config names another);
// an instance without one is the base. The balancers muster_p2c and
// muster_wrr route a colored call to the READY instances of its color and
// an uncolored call to the base (see their package documentation).
//
// Everything here is safe for concurrent use; there is no package state.
package color
