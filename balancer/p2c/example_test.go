package p2c_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/p2c" // registers muster_p2c
	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/resolver"
)

// The service config names muster_p2c, with its config: how fast latency
// is forgotten, and when an endpoint that keeps failing is ejected. Each
// call goes to the less loaded of two endpoints drawn at random.
func Example() {
	var addrs []string
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		addrs = append(addrs, lis.Addr().String())
		gs := grpc.NewServer()
		userpb.RegisterUserServer(gs, &usersvc.Service{Addr: lis.Addr().String})
		go gs.Serve(lis)
		defer gs.Stop()
	}
	conn, err := grpc.NewClient("direct:///"+addrs[0]+","+addrs[1],
		grpc.WithResolvers(resolver.NewDirectBuilder()), // or resolver.NewBuilder(discovery) and "muster:///user"
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{
			"decayTime":"10s",
			"outlier":{"consecutiveFailures":5,"baseEjectionTime":"30s","maxEjectionPercent":50}}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	client, served := userpb.NewUserClient(conn), 0
	for range 100 {
		reply, err := client.Get(context.Background(), &userpb.GetRequest{Id: "2"}, grpc.WaitForReady(true))
		if err != nil {
			log.Fatal(err)
		}
		if reply.GetName() == "Grace Hopper" {
			served++
		}
	}
	fmt.Println("calls answered:", served)
	// Output: calls answered: 100
}
