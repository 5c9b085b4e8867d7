package legacy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

func mustLayouts(t *testing.T, opts ...legacy.Option) (*legacy.GoZero, *legacy.Kratos, *legacy.Naming) {
	t.Helper()
	g, err := legacy.NewGoZero(opts...)
	if err != nil {
		t.Fatal(err)
	}
	k, err := legacy.NewKratos(opts...)
	if err != nil {
		t.Fatal(err)
	}
	n, err := legacy.NewNaming(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g, k, n
}

func TestPrefixes(t *testing.T) {
	g, k, n := mustLayouts(t, legacy.WithName("user", "user.rpc"), legacy.WithKratosNamespace("/ms"))
	for _, c := range []struct{ got, want string }{
		{g.Prefix("user"), "user.rpc/"},
		{g.Prefix("order"), "order/"},
		{k.Prefix("user"), "/ms/user.rpc/"},
		{n.Prefix("user"), "user.rpc/"},
	} {
		if c.got != c.want {
			t.Errorf("prefix %q, want %q", c.got, c.want)
		}
	}
	_, k, _ = mustLayouts(t)
	if got := k.Prefix("user"); got != "/microservices/user/" {
		t.Errorf("default Kratos prefix %q", got)
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, opt := range []legacy.Option{
		legacy.WithName("User", "x"),
		legacy.WithName("user", ""),
		legacy.WithName("user", "x/"),
		legacy.WithKratosNamespace("ms"),
		legacy.WithKratosNamespace("/ms/"),
	} {
		if _, err := legacy.NewKratos(opt); err == nil || !strings.HasPrefix(err.Error(), "legacy: With") {
			t.Errorf("want an error naming the option, got %v", err)
		}
	}
}

func TestDecode(t *testing.T) {
	g, k, n := mustLayouts(t)
	type decoder interface {
		Decode(service, suffix string, value []byte) (registry.Instance, error)
	}
	for _, c := range []struct {
		name   string
		l      decoder
		suffix string
		value  string
		want   registry.Instance // Addr empty: an error is wanted
		skip   bool              // etcd.ErrNotInstance wanted
	}{
		{name: "gozero", l: g, suffix: "7587867878", value: "10.0.0.7:9000",
			want: registry.Instance{Name: "svc", ID: "7587867878", Addr: "10.0.0.7:9000"}},
		{name: "kratos", l: k, suffix: "a1", value: `{"id":"a1","name":"svc","version":"v2","metadata":{"color":"blue"},"endpoints":["http://10.0.0.7:8000","grpc://10.0.0.7:9000?isSecure=false"]}`,
			want: registry.Instance{Name: "svc", ID: "a1", Addr: "10.0.0.7:9000", Version: "v2", Metadata: map[string]string{"color": "blue"}}},
		{name: "kratos other name", l: k, suffix: "a1", value: `{"id":"a1","name":"svc2","endpoints":["grpc://10.0.0.7:9000"]}`, skip: true},
		{name: "kratos not json", l: k, suffix: "a1", value: `grpc://10.0.0.7:9000`},
		{name: "kratos no port", l: k, suffix: "a1", value: `{"name":"svc","endpoints":["grpc://10.0.0.7"]}`},
		{name: "kratos unknown scheme", l: k, suffix: "a1", value: `{"name":"svc","endpoints":["http://10.0.0.7:80"]}`},
		{name: "kratos no endpoint", l: k, suffix: "a1", value: `{"name":"svc"}`},
		{name: "naming", l: n, suffix: "10.0.0.7:9000", value: `{"Op":0,"Addr":"10.0.0.7:9000","Metadata":{"zone":"a"}}`,
			want: registry.Instance{Name: "svc", ID: "10.0.0.7:9000", Addr: "10.0.0.7:9000", Metadata: map[string]string{"zone": "a"}}},
		{name: "naming nested key, metadata not strings", l: n, suffix: "e/1", value: `{"Op":0,"Addr":"10.0.0.7:9000","Metadata":{"n":1}}`,
			want: registry.Instance{Name: "svc", ID: "e%2F1", Addr: "10.0.0.7:9000"}},
		{name: "naming not json", l: n, suffix: "e1", value: `10.0.0.7:9000`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.l.Decode("svc", c.suffix, []byte(c.value))
			switch {
			case c.skip:
				if !errors.Is(err, etcd.ErrNotInstance) {
					t.Fatalf("got %+v, %v; want ErrNotInstance", got, err)
				}
			case c.want.Addr == "":
				if err == nil {
					t.Fatalf("got %+v; want an error", got)
				}
			case err != nil:
				t.Fatal(err)
			case !got.Equal(c.want):
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
