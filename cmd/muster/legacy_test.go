package main

import (
	"strings"
	"testing"
)

// TestLsLayouts lists a service in each legacy layout, values written as
// each framework writes them, and refuses inconsistent flags.
func TestLsLayouts(t *testing.T) {
	s := startServe(t, t.TempDir())
	cli := newClient(t, s.endpoint)
	putRaw(t, cli, "user.rpc/7587867878", "10.0.0.1:9000")
	putRaw(t, cli, "/microservices/user/k1", `{"id":"k1","name":"user","version":"v1","metadata":{},"endpoints":["grpc://10.0.0.2:9000?isSecure=false"]}`)
	putRaw(t, cli, "user/n1", `{"Op":0,"Addr":"10.0.0.3:9000","Metadata":null}`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "go-zero", "--legacy-name", "user.rpc"}, "7587867878  10.0.0.1:9000"},
		{[]string{"--layout", "kratos"}, "k1  10.0.0.2:9000  v1"},
		{[]string{"--layout", "etcd-naming"}, "n1  10.0.0.3:9000"},
	} {
		r := runOK(t, append([]string{"ls", "user", "--endpoints", s.endpoint}, c.args...)...)
		if !strings.Contains(r.stdout, c.want) {
			t.Errorf("ls user %v:\n%s\nwant a row starting %q", c.args, r.stdout, c.want)
		}
	}
	for _, args := range [][]string{
		{"ls", "--layout", "go-zero"},
		{"ls", "user", "--layout", "zookeeper"},
		{"ls", "user", "--legacy-name", "user.rpc"},
	} {
		if r := run(append(args, "--endpoints", s.endpoint)...); r.code == 0 {
			t.Errorf("%v: want a usage error, got %+v", args, r)
		}
	}
}
