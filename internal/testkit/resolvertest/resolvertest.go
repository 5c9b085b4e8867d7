// Package resolvertest observes resolvers at real gRPC channels: a Builder
// wrapper that reports every state a resolver hands its ClientConn.
package resolvertest

import (
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
)

// RecordingBuilder wraps a resolver builder so that every UpdateState its
// resolvers make is reported to OnUpdate (with the number of endpoints and
// the time) and to OnState (with the whole state), each if set, before it
// reaches the channel.
type RecordingBuilder struct {
	grpcresolver.Builder
	OnUpdate func(endpoints int, at time.Time)
	OnState  func(s grpcresolver.State, at time.Time)
}

// Build builds the wrapped resolver on a recording ClientConn.
func (b RecordingBuilder) Build(t grpcresolver.Target, cc grpcresolver.ClientConn, o grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	return b.Builder.Build(t, recordingCC{ClientConn: cc, b: b}, o)
}

type recordingCC struct {
	grpcresolver.ClientConn
	b RecordingBuilder
}

func (c recordingCC) UpdateState(s grpcresolver.State) error {
	now := time.Now()
	if c.b.OnUpdate != nil {
		c.b.OnUpdate(len(s.Endpoints), now)
	}
	if c.b.OnState != nil {
		c.b.OnState(s, now)
	}
	return c.ClientConn.UpdateState(s)
}
