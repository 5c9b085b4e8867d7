package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/musterhq/muster/registry"
)

// followHealth keeps the registered instance in step with the server's
// overall health status (""): while it is anything but SERVING the
// instance is registered Draining, so that balancers stop sending it new
// calls, and when it is SERVING again it is registered as it was. It
// writes the instance's own value only: an operator's override (muster
// drain) is a separate key, kept across these writes, so an instance an
// operator drained stays drained. It ends when Shutdown begins or the
// server stops.
func (s *Server) followHealth(in registry.Instance) {
	defer s.follower.Done()
	statuses := make(chan healthpb.HealthCheckResponse_ServingStatus, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = s.health.Watch(&healthpb.HealthCheckRequest{}, &healthUpdates{ctx: s.leaving, statuses: statuses})
	}()
	defer func() { <-watched }()
	drained := false
	for {
		var st healthpb.HealthCheckResponse_ServingStatus
		select {
		case st = <-statuses:
		case <-s.leaving.Done():
			return
		}
		if want := st != healthpb.HealthCheckResponse_SERVING; want != drained {
			drained = want
			in.Draining = want
			ctx, cancel := context.WithTimeout(s.leaving, s.opts.registerTimeout)
			err := s.reg.Register(ctx, in)
			cancel()
			switch {
			case s.leaving.Err() != nil:
				return
			case err != nil && !errors.Is(err, registry.ErrPending):
				s.log.Warn("health changed but the registry refused the instance's new state", "health", st.String(), "draining", want, "error", err)
			case want:
				s.log.Info("health not SERVING: drained in the registry", "health", st.String(), "pending", err != nil)
			default:
				s.log.Info("health SERVING again: undrained in the registry", "pending", err != nil)
			}
		}
	}
}

// healthUpdates is the stream the health service's own Watch sends the
// overall status to, in process; it keeps the latest status only.
type healthUpdates struct {
	ctx      context.Context
	statuses chan healthpb.HealthCheckResponse_ServingStatus
}

var _ grpc.ServerStreamingServer[healthpb.HealthCheckResponse] = (*healthUpdates)(nil)

// Send replaces an unread status with resp's. Watch calls it from one
// goroutine.
func (h *healthUpdates) Send(resp *healthpb.HealthCheckResponse) error {
	select {
	case <-h.statuses:
	default:
	}
	h.statuses <- resp.Status
	return nil
}

func (h *healthUpdates) Context() context.Context     { return h.ctx }
func (h *healthUpdates) SetHeader(metadata.MD) error  { return nil }
func (h *healthUpdates) SendHeader(metadata.MD) error { return nil }
func (h *healthUpdates) SetTrailer(metadata.MD)       {}
func (h *healthUpdates) SendMsg(any) error            { return nil }
func (h *healthUpdates) RecvMsg(any) error            { return nil }
