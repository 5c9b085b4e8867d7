package etcd

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// ClientConfig returns an etcd client configuration tuned for a registry
// client: it reconnects within about two seconds after an outage (gRPC's
// own reconnect backoff grows to 120s, which would keep a registrar away
// from a recovered etcd for minutes), detects a dead connection within
// about eight seconds through keepalive pings, and discards the client's
// own zap logs (Muster logs through log/slog). Adjust the result as needed
// (TLS, credentials) and pass it to clientv3.New.
func ClientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		PermitWithoutStream:  true,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: grpcbackoff.Config{
					BaseDelay:  100 * time.Millisecond,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   2 * time.Second,
				},
				MinConnectTimeout: 2 * time.Second,
			}),
		},
	}
}
