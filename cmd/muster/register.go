package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// registerOptions are the flags of muster register.
type registerOptions struct {
	in       registry.Instance
	meta     []string
	check    string
	ttl      time.Duration
	interval time.Duration
	failures int
}

func newRegisterCmd(g *globalOptions) *cobra.Command {
	o := registerOptions{}
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Keep a service that is not written in Go registered while it is healthy",
		Long: `Register is a sidecar: it registers one instance, keeps it registered while
the instance's health check passes, deregisters it after --failures checks
in a row fail, registers it again when a check passes, and deregisters it on
SIGINT or SIGTERM (revoking its lease).

Checks (--check): grpc://host:port (the standard gRPC health service,
overall status), http://host:port/path (any 2xx), tcp://host:port (a
connection). Without --check the instance stays registered until stopped.`,
		Example: `  muster register --name user --addr 10.0.0.7:9000 --zone eu-1a --check grpc://127.0.0.1:9000
  muster register --name web --addr 10.0.0.8:8080 --meta team=core --check http://127.0.0.1:8080/healthz`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			check, err := o.parse()
			if err != nil {
				return err
			}
			return runRegister(cmd.Context(), g, o, check, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.in.Name, "name", "", "service name (required)")
	f.StringVar(&o.in.Addr, "addr", "", "address clients dial, host:port (required)")
	f.StringVar(&o.in.ID, "id", "", "instance ID (default: the address)")
	f.StringVar(&o.in.Version, "version", "", "version of the instance")
	f.StringVar(&o.in.Zone, "zone", "", "zone the instance runs in")
	f.IntVar(&o.in.Weight, "weight", registry.DefaultWeight, fmt.Sprintf("weight 1..%d", registry.MaxWeight))
	f.StringArrayVar(&o.meta, "meta", nil, "metadata key=value (repeatable)")
	f.StringVar(&o.check, "check", "", "health check: grpc://host:port, http://host:port/path or tcp://host:port")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "lease TTL: how long the entry outlives this process if it is killed")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "time between health checks")
	f.IntVar(&o.failures, "failures", 3, "failed checks in a row before deregistering")
	return cmd
}

// parse validates the flags and returns the health check.
func (o *registerOptions) parse() (func(context.Context) error, error) {
	if o.in.Name == "" || o.in.Addr == "" {
		return nil, usageErrorf("--name and --addr are required")
	}
	for _, kv := range o.meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--meta %q: want key=value", kv)
		}
		if o.in.Metadata == nil {
			o.in.Metadata = map[string]string{}
		}
		o.in.Metadata[k] = v
	}
	if err := o.in.Validate(); err != nil {
		return nil, usageErrorf("%v", err)
	}
	if o.ttl < time.Second || o.interval <= 0 || o.failures < 1 {
		return nil, usageErrorf("--ttl must be at least 1s, --interval positive, --failures at least 1")
	}
	if o.check == "" {
		return nil, nil
	}
	u, err := url.Parse(o.check)
	if err != nil || u.Host == "" {
		return nil, usageErrorf("--check %q: want grpc://host:port, http://host:port/path or tcp://host:port", o.check)
	}
	timeout := min(o.interval, 5*time.Second)
	switch u.Scheme {
	case "grpc":
		return grpcCheck(u.Host, timeout), nil
	case "http", "https":
		return httpCheck(o.check, timeout), nil
	case "tcp":
		return tcpCheck(u.Host, timeout), nil
	}
	return nil, usageErrorf("--check %q: unknown scheme %q; want grpc, http or tcp", o.check, u.Scheme)
}

func grpcCheck(addr string, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health status %v", resp.GetStatus())
		}
		return nil
	}
}

func httpCheck(target string, timeout time.Duration) func(context.Context) error {
	client := &http.Client{Timeout: timeout}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
}

func tcpCheck(addr string, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// runRegister keeps o.in registered while check passes, until ctx ends.
func runRegister(ctx context.Context, g *globalOptions, o registerOptions, check func(context.Context) error, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	reg, err := etcd.NewRegistrar(s.cli, etcd.WithPrefix(g.prefix), etcd.WithTTL(o.ttl),
		etcd.WithRequestTimeout(g.timeout), etcd.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))))
	if err != nil {
		return err
	}
	defer func() {
		if err := reg.Close(); err != nil {
			log.Error("deregistering on exit", "error", err)
		} else {
			log.Info("deregistered", "service", o.in.Name, "addr", o.in.Addr)
		}
	}()

	registered, failed := false, 0
	apply := func(want bool) {
		if want == registered {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		if want {
			err = reg.Register(rctx, o.in)
		} else {
			err = reg.Deregister(rctx, o.in.Name, o.in.Normalize().ID)
		}
		switch {
		case err == nil || errors.Is(err, registry.ErrPending):
			registered = want
			if want {
				log.Info("registered", "service", o.in.Name, "addr", o.in.Addr, "pending", err != nil)
			} else {
				log.Info("deregistered: health check failing", "service", o.in.Name, "addr", o.in.Addr, "failures", failed)
			}
		default:
			log.Error("registry", "error", err)
		}
	}
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for {
		healthy := true
		if check != nil {
			if err := check(ctx); err != nil {
				failed++
				healthy = failed < o.failures && registered
				if ctx.Err() == nil {
					log.Warn("health check failed", "error", err, "in_a_row", failed)
				}
			} else {
				failed = 0
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		apply(healthy)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
