package console_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry/etcd"
)

// The console is an http.Handler for the paths under /ui/: mount it on a
// mux and open http://localhost:8080/ui/ in a browser. Without an admin
// credential (WithAdminToken, WithAdminUsers) it is read-only.
func ExampleNew() {
	// A client of an embedded etcd; a program takes
	// clientv3.New(etcd.ClientConfig("http://etcd-0:2379", ...)).
	cli, stop, err := examplekit.EtcdClient()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	store, err := etcd.NewStore(cli) // the client stays the caller's
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ui, err := console.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer ui.Close()
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	hs := httptest.NewServer(mux) // a program: http.ListenAndServe("localhost:8080", mux)
	defer hs.Close()

	resp, err := http.Get(hs.URL + "/ui/api/session")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.Status, " ", string(body))
	// Output:
	// 200 OK {"admin":false,"loggedIn":false,"users":false,"token":false,"prefix":"/muster/services","xds":false}
}
