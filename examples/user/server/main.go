// Command server runs one instance of the example user service: it serves
// gRPC, registers itself in etcd as "user" through Muster, and leaves
// cleanly on SIGINT or SIGTERM: it turns NOT_SERVING, deregisters, drains
// and stops, logging each step (log/slog, key=value on stderr, like
// `muster serve`).
//
//	go run ./examples/user/server --endpoints http://127.0.0.1:2379 --zone eu-1a --region eu-1
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/server"
)

func main() {
	endpoints := flag.String("endpoints", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	zone := flag.String("zone", "", "zone this instance runs in")
	region := flag.String("region", "", "region this instance runs in")
	version := flag.String("version", "v1", "version this instance runs")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), log, strings.Split(*endpoints, ","), *listen, registry.Instance{Zone: *zone, Region: *region, Version: *version}); err != nil {
		log.Error("user service stopped with an error", "error", err)
		os.Exit(1)
	}
}

// run serves the user service, registered as in says (its Zone, Region
// and Version; the name is set here).
func run(ctx context.Context, log *slog.Logger, endpoints []string, listen string, in registry.Instance) error {
	cli, err := clientv3.New(etcd.ClientConfig(endpoints...))
	if err != nil {
		return err
	}
	defer cli.Close()
	reg, err := etcd.NewRegistrar(cli, etcd.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() {
		// Revokes the lease: whatever is still registered leaves
		// discovery at once.
		if err := reg.Close(); err != nil {
			log.Warn("lease not revoked; registrations expire with its TTL", "error", err)
			return
		}
		log.Info("registrar closed; lease revoked")
	}()

	in.Name = "user"
	s, err := server.New(reg, in, server.WithLogger(log))
	if err != nil {
		return err
	}
	userpb.RegisterUserServer(s.GRPC(), &usersvc.Service{Addr: func() string { return s.Instance().Addr }})
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Info("user service listening", "addr", lis.Addr().String())
	return server.Run(ctx, s, lis, 30*time.Second)
}
