package p2c_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/p2c" // registers muster_p2c
	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/resolver"
)

// The service config names muster_p2c, with its config: how fast latency
// is forgotten, and when an endpoint that keeps failing is ejected. Each
// call goes to the less loaded of two endpoints drawn at random.
func Example() {
	addrs, stop, err := examplekit.UserBackends(2) // two gRPC servers of the user service
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
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
