package wrr_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/wrr" // registers muster_wrr
	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/resolver"
)

// The service config names muster_wrr. Endpoints of the Muster resolver
// carry their instance's weight; these static ones are weighed by the
// config's endpointWeights: the first backend takes three calls in four.
func Example() {
	addrs, stop, err := examplekit.UserBackends(2) // two gRPC servers of the user service
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	config := fmt.Sprintf(`{"loadBalancingConfig":[{"muster_wrr":{
		"endpointWeights":{%q:300,%q:100},
		"outlier":{"consecutiveFailures":5,"baseEjectionTime":"30s"}}}]}`, addrs[0], addrs[1])
	conn, err := grpc.NewClient("direct:///"+addrs[0]+","+addrs[1],
		grpc.WithResolvers(resolver.NewDirectBuilder()),
		grpc.WithDefaultServiceConfig(config),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	client, served := userpb.NewUserClient(conn), map[string]int{}
	call := func() {
		reply, err := client.Get(context.Background(), &userpb.GetRequest{Id: "1"}, grpc.WaitForReady(true))
		if err != nil {
			log.Fatal(err)
		}
		served[reply.GetServedBy()]++
	}
	for len(served) < 2 { // until both backends are ready
		call()
	}
	clear(served)
	for range 400 {
		call()
	}
	fmt.Println("first:", served[addrs[0]], "second:", served[addrs[1]])
	// Output: first: 300 second: 100
}
