// Command gateway is a small HTTP front for the example user service: it
// finds the service's instances through Muster ("muster:///user") and
// balances calls over them.
//
//	go run ./examples/user/gateway --endpoints http://127.0.0.1:2379 --listen 127.0.0.1:8080
//	curl http://127.0.0.1:8080/users/1
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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
	if err := run(ctx, strings.Split(*endpoints, ","), *listen); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoints []string, listen string) error {
	cli, err := clientv3.New(etcd.ClientConfig(endpoints...))
	if err != nil {
		return err
	}
	defer cli.Close()
	disc, err := etcd.NewDiscovery(cli)
	if err != nil {
		return err
	}
	defer disc.Close()
	conn, err := dialUsers(disc)
	if err != nil {
		return err
	}
	defer conn.Close()

	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(userpb.NewUserClient(conn)), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// dialUsers opens the channel to every instance of the user service.
func dialUsers(disc *etcd.Discovery) (*grpc.ClientConn, error) {
	return grpc.NewClient("muster:///user",
		grpc.WithResolvers(resolver.NewBuilder(disc)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
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
