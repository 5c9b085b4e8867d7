package p2c

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"
)

type grpcConn = grpc.ClientConn

func withResolvers(b ...grpcresolver.Builder) grpc.DialOption { return grpc.WithResolvers(b...) }

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
