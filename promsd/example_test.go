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

	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
)

// Prometheus scrapes every instance whose metadata says where its metrics
// are served: the handler answers http_sd_configs with one target group
// per instance, labelled from the registry.
func ExampleNewHandler() {
	// A Registrar and a Discovery (registry/etcd) on an embedded etcd.
	r, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	in := registry.Instance{Name: "greeter", ID: "greeter-1", Addr: "10.0.0.1:9000", Zone: "eu-1a",
		Version: "v1.4.2", Metadata: map[string]string{promsd.MetadataKey: ":9100"}}
	if err := r.Registrar.Register(context.Background(), in); err != nil {
		log.Fatal(err)
	}
	h, err := promsd.NewHandler(r.Discovery, promsd.WithServices("greeter"))
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
