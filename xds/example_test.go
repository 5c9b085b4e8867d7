package xds_test

import (
	"context"
	"log"
	"net"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// A control plane beside an etcd cluster: every registered service is
// published to xDS clients on port 18000. Clients get a bootstrap from
// muster xds-bootstrap and call xds:///<service>.
func Example() {
	cli, err := clientv3.New(etcd.ClientConfig("http://127.0.0.1:2379"))
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	d, err := etcd.NewDiscovery(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	cp, err := xds.New(d, xds.WithLBPolicy(xds.RingHash, "user")) // "user" spreads calls by weight
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Close()
	lis, err := net.Listen("tcp", ":18000")
	if err != nil {
		log.Fatal(err)
	}
	if err := cp.Serve(context.Background(), lis); err != nil {
		log.Fatal(err)
	}
}
