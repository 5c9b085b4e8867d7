package lb

import (
	"io"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Outcome is what a finished call says about its endpoint.
type Outcome uint8

// Outcomes, from Classify.
const (
	// NotSent: gRPC calls Done with an empty DoneInfo for a pick whose
	// connection turned out not to be ready, and picks again. No call.
	NotSent Outcome = iota
	// Success: the call succeeded, or failed with an answer of the
	// application (NotFound, InvalidArgument, PermissionDenied, ...).
	Success
	// Failure: the call failed in a way that says the endpoint is
	// unhealthy: Unavailable, DeadlineExceeded, ResourceExhausted,
	// Internal, DataLoss, Unimplemented, or an error without a gRPC status
	// (from the transport).
	Failure
	// Canceled: the caller gave up. Nothing is known about the endpoint's
	// health, and its latency was at least the time the call ran.
	Canceled
)

// Classify returns the outcome of a call from its Done callback's info. It
// does not allocate for errors that carry a gRPC status.
func Classify(info balancer.DoneInfo) Outcome {
	err := info.Err
	if err == nil || err == io.EOF {
		if err == nil && !info.BytesSent {
			return NotSent
		}
		return Success
	}
	s, ok := status.FromError(err)
	if !ok {
		return Failure
	}
	switch s.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Internal, codes.DataLoss, codes.Unimplemented:
		return Failure
	case codes.Canceled:
		return Canceled
	}
	return Success
}
