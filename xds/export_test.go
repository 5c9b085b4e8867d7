package xds

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// PlainADS is go-control-plane's ADS server over s's cache with none of
// s's admission (no stream shares, first-request deadline, bounds or
// subscription budget): the anchor the admission benchmark compares s
// with, in the same run and on the same changes.
func PlainADS(s *Server) discoveryv3.AggregatedDiscoveryServiceServer {
	return serverv3.NewServer(s.ctx, s.c, nil)
}
