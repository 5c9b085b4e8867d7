// Command gateway is a small HTTP front for the example user service: it
// finds the service's instances through Muster ("muster:///user") and
// balances calls over them with muster_p2c, which follows each instance's
// weight (so `muster drain` and `muster weight` show at once). It logs with
// log/slog, key=value on stderr, like `muster serve`.
//
//	go run ./examples/user/gateway --endpoints http://127.0.0.1:2379 --listen 127.0.0.1:8080
//	curl http://127.0.0.1:8080/users/1
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

func main() {
	endpoints := flag.String("endpoints", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP address to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, log, strings.Split(*endpoints, ","), *listen); err != nil {
		log.Error("gateway stopped with an error", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, endpoints []string, listen string) error {
	cli, err := clientv3.New(etcd.ClientConfig(endpoints...))
	if err != nil {
		return err
	}
	defer cli.Close()
	disc, err := etcd.NewDiscovery(cli, etcd.WithLogger(log))
	if err != nil {
		return err
	}
	defer disc.Close()
	conn, err := dialUsers(disc, log)
	if err != nil {
		return err
	}
	defer conn.Close()

	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Info("gateway listening", "addr", lis.Addr().String(), "target", usersTarget, "balancer", p2c.Name)
	srv := &http.Server{Handler: newHandler(userpb.NewUserClient(conn)), ReadHeaderTimeout: 5 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		log.Info("shutting down: no new requests; waiting for requests in flight", "timeout", gatewayShutdown)
		sctx, cancel := context.WithTimeout(context.Background(), gatewayShutdown)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("requests still in flight at the deadline", "error", err)
		}
	}()
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped
	log.Info("gateway stopped")
	return nil
}

// usersTarget is the gRPC target of the user service.
const usersTarget = "muster:///user"

// gatewayShutdown bounds the wait for HTTP requests in flight on shutdown.
const gatewayShutdown = 5 * time.Second

// dialUsers opens the channel to every instance of the user service,
// balanced by muster_p2c: fewer calls go to slow instances, none to one
// drained to weight 0.
func dialUsers(disc *etcd.Discovery, log *slog.Logger) (*grpc.ClientConn, error) {
	return grpc.NewClient(usersTarget,
		grpc.WithResolvers(resolver.NewBuilder(disc, resolver.WithLogger(log))),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+p2c.Name+`":{}}]}`))
}

// newHandler serves GET /users/{id} as JSON.
func newHandler(users userpb.UserClient) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		reply, err := users.Get(ctx, &userpb.GetRequest{Id: r.PathValue("id")})
		if err != nil {
			code := http.StatusBadGateway
			if status.Code(err) == codes.NotFound {
				code = http.StatusNotFound
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"id": reply.GetId(), "name": reply.GetName(), "served_by": reply.GetServedBy(),
		})
	})
	return mux
}
