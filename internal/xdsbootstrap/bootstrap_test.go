package xdsbootstrap

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type parsed struct {
	XDSServers []struct {
		ServerURI    string `json:"server_uri"`
		ChannelCreds []struct {
			Type   string            `json:"type"`
			Config map[string]string `json:"config"`
		} `json:"channel_creds"`
		ServerFeatures []string `json:"server_features"`
	} `json:"xds_servers"`
	Node struct {
		ID       string             `json:"id"`
		Locality *map[string]string `json:"locality"`
	} `json:"node"`
}

func parse(t *testing.T, c Config) parsed {
	t.Helper()
	b, err := Marshal(c)
	if err != nil {
		t.Fatalf("Marshal(%+v): %v", c, err)
	}
	var p parsed
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return p
}

// Every bootstrap has its node's locality, empty without a zone or
// region (grpc-js-xds refuses a node without one), each server the two
// features, and the forms of several servers.
func TestMarshal(t *testing.T) {
	p := parse(t, Config{Servers: []string{"10.0.0.5:18000"}, NodeID: "web-1"})
	if p.Node.Locality == nil || len(*p.Node.Locality) != 0 {
		t.Errorf("no zone or region: locality %v, want {}", p.Node.Locality)
	}
	if len(p.XDSServers) != 1 || !slices.Equal(p.XDSServers[0].ServerFeatures, []string{"xds_v3", "ignore_resource_deletion"}) ||
		p.XDSServers[0].ChannelCreds[0].Type != "insecure" {
		t.Errorf("servers %+v", p.XDSServers)
	}
	p = parse(t, Config{Servers: []string{"10.0.0.5:18000"}, NodeID: "web-1", Region: "r1", Zone: "z1"})
	if l := *p.Node.Locality; l["region"] != "r1" || l["zone"] != "z1" {
		t.Errorf("locality %v, want r1/z1", l)
	}
	p = parse(t, Config{Servers: []string{"10.0.0.5:18000", "10.0.0.6:18001"}, Form: FormList, NodeID: "web-1"})
	if len(p.XDSServers) != 1 || p.XDSServers[0].ServerURI != "ipv4:10.0.0.5:18000,10.0.0.6:18001" {
		t.Errorf("list: %+v", p.XDSServers)
	}
	p = parse(t, Config{Servers: []string{"a.example:1", "b.example:2"}, Form: FormFallback, NodeID: "web-1"})
	if len(p.XDSServers) != 2 || p.XDSServers[1].ServerURI != "b.example:2" {
		t.Errorf("fallback: %+v", p.XDSServers)
	}
	p = parse(t, Config{Servers: []string{"cp.example:1"}, NodeID: "web-1", CACert: "ca.pem", Cert: "c.pem", Key: "k.pem"})
	if c := p.XDSServers[0].ChannelCreds[0]; c.Type != "tls" || c.Config["ca_certificate_file"] != "ca.pem" ||
		c.Config["certificate_file"] != "c.pem" || c.Config["private_key_file"] != "k.pem" {
		t.Errorf("tls: %+v", c)
	}
}

// An invalid Config is an error wrapping ErrInvalid that names the flag.
func TestMarshalInvalid(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		flag string
	}{
		{Config{Servers: []string{"10.0.0.5:18000"}}, "--node-id"},
		{Config{NodeID: "w"}, "--server"},
		{Config{Servers: []string{"no-port"}, NodeID: "w"}, `--server "no-port"`},
		{Config{Servers: []string{"10.0.0.5:1", "10.0.0.6:1"}, NodeID: "w"}, "--form"},
		{Config{Servers: []string{"10.0.0.5:1"}, Form: "ring", NodeID: "w"}, `--form "ring"`},
		{Config{Servers: []string{"10.0.0.5:1", "[fd00::6]:1"}, Form: FormList, NodeID: "w"}, `--server "[fd00::6]:1"`},
		{Config{Servers: []string{"10.0.0.5:1"}, NodeID: "w", Cert: "c.pem"}, "--xds-cert and --xds-key"},
	} {
		_, err := Marshal(tc.c)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Marshal(%+v): %v, want ErrInvalid naming %s", tc.c, err, tc.flag)
		}
	}
}
