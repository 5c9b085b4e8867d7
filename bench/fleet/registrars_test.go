package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// serviceName is the name of service s.
func serviceName(s int) string { return fmt.Sprintf("svc-%04d", s) }

// fleetInstance is instance i of registrar process p: the fleet's g-th
// instance, in one of the spread services the process serves (services
// p×spread to p×spread+spread-1, modulo services, in turn), at an address
// of its own where nothing listens (a channel's connection attempts are
// refused at once).
func fleetInstance(p, i, instances, services, spread int) registry.Instance {
	g := p*instances + i
	host := g / 40000
	return registry.Instance{
		Name: serviceName((p*spread + i%spread) % services),
		ID:   fmt.Sprintf("p%d-i%d", p, i),
		Addr: fmt.Sprintf("127.1.%d.%d:%d", host/256, host%256, 20000+g%40000),
	}
}

// regionOf is the region of registrar process p: the processes of each
// service take the regions in turn (process p serves service p mod
// services first, see fleetInstance).
func regionOf(p, services, regions int) int { return p / services % regions }

// runRegistrars is a registrar host: cfg.Count registrar processes, each
// with an etcd client and a Registrar of its own, registering their
// instances; it prints "ready <heap before> <heap after>" once all are
// registered and holds them until ctx ends.
func runRegistrars(ctx context.Context, cfg roleConfig, out *lineWriter) error {
	opts, err := registrarOptions(cfg.TTL, cfg.Naming)
	if err != nil {
		return err
	}
	heap0 := liveHeap()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for p := cfg.First; p < cfg.First+cfg.Count; p++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := startProcess(ctx, cfg, p, opts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	out.printf("ready %d %d", heap0, liveHeap())
	<-ctx.Done()
	// The benchmark is over: the process exits without revoking, as a
	// crashed fleet would; the cluster is discarded with it.
	return nil
}

// startProcess is registrar process p: its etcd client and Registrar,
// with its instances registered. A Register that etcd does not answer in
// time (registry.ErrPending, an etcd overwhelmed by the fleet starting at
// once) goes on in the background, as in a real process: the process is
// ready once the registrar has written them all. Both live until the host
// exits.
func startProcess(ctx context.Context, cfg roleConfig, p int, opts []etcd.RegistrarOption) error {
	cli, err := clientv3.New(etcd.ClientConfig(cfg.Regions[regionOf(p, cfg.Services, len(cfg.Regions))]...))
	if err != nil {
		return err
	}
	reg, err := etcd.NewRegistrar(cli, opts...)
	if err != nil {
		return err
	}
	for i := range cfg.Instances {
		err := reg.Register(ctx, fleetInstance(p, i, cfg.Instances, cfg.Services, cfg.Spread))
		if err != nil && !errors.Is(err, registry.ErrPending) {
			return fmt.Errorf("process %d: %w", p, err)
		}
	}
	return reg.WaitRegistered(ctx)
}

// registrarOptions are the options of every registrar of the fleet: its
// TTL, and the etcd-naming copy of each instance when naming channels
// follow the fleet.
func registrarOptions(ttl time.Duration, naming bool) ([]etcd.RegistrarOption, error) {
	opts := []etcd.RegistrarOption{etcd.WithTTL(ttl), etcd.WithLogger(quiet)}
	if naming {
		n, err := legacy.NewNaming()
		if err != nil {
			return nil, err
		}
		opts = append(opts, etcd.WithMirror(n))
	}
	return opts, nil
}
