package promsd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/musterhq/muster/internal/testkit/exampleetcd"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// Prometheus scrapes every instance whose metadata says where its metrics
// are served: the handler answers http_sd_configs with one target group
// per instance, labelled from the registry.
func ExampleNewHandler() {
	// A client of an embedded etcd; a program takes
	// clientv3.New(etcd.ClientConfig("http://etcd-0:2379", ...)).
	cli, stop, err := exampleetcd.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	reg, err := etcd.NewRegistrar(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	in := registry.Instance{Name: "greeter", ID: "greeter-1", Addr: "10.0.0.1:9000", Zone: "eu-1a",
		Version: "v1.4.2", Metadata: map[string]string{promsd.MetadataKey: ":9100"}}
	if err := reg.Register(context.Background(), in); err != nil {
		log.Fatal(err)
	}

	disc, err := etcd.NewDiscovery(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer disc.Close()
	h, err := promsd.NewHandler(disc, promsd.WithServices("greeter"))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	for { // until the handler's watch has loaded the service
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/prometheus/sd", nil))
		if strings.Contains(rec.Body.String(), "targets") {
			var out bytes.Buffer
			_ = json.Indent(&out, rec.Body.Bytes(), "", "  ")
			fmt.Println(out.String())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// [
	//   {
	//     "targets": [
	//       "10.0.0.1:9100"
	//     ],
	//     "labels": {
	//       "__meta_muster_addr": "10.0.0.1:9000",
	//       "__meta_muster_color": "",
	//       "__meta_muster_draining": "false",
	//       "__meta_muster_id": "greeter-1",
	//       "__meta_muster_metadata_metrics": ":9100",
	//       "__meta_muster_region": "",
	//       "__meta_muster_service": "greeter",
	//       "__meta_muster_version": "v1.4.2",
	//       "__meta_muster_weight": "100",
	//       "__meta_muster_zone": "eu-1a"
	//     }
	//   }
	// ]
}
