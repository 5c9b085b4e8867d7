// Package xdsbootstrap writes the gRPC xDS bootstrap (gRFC A27) of a client
// of Muster's control plane: what muster xds-bootstrap prints, and what the
// xDS client tests hand every client they run, so that the clients read
// the command's own output.
//
// Every form it writes is accepted by every client Muster supports
// (docs/XDS.md, "Clients"); its errors name the command's flags, and wrap
// ErrInvalid.
package xdsbootstrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrInvalid is wrapped by every error of Marshal about its Config.
var ErrInvalid = errors.New("invalid bootstrap")

// The forms of several control planes in a bootstrap (Config.Form).
const (
	// FormList is one server URI naming every control plane, an ipv4: or
	// ipv6: list target (C-core and grpc-js).
	FormList = "list"
	// FormFallback is one xds_servers entry per control plane (gRFC A71).
	FormFallback = "fallback"
)

// Config is what a bootstrap says, as muster xds-bootstrap's flags give it.
type Config struct {
	// Servers are the control planes, host:port each (--server); several
	// need a Form.
	Servers []string
	// Form is how several Servers are written: FormList or FormFallback.
	Form string
	// NodeID names the client in the control plane's logs (--node-id);
	// required.
	NodeID string
	// Region and Zone are the client's locality (--region, --zone); empty
	// for none.
	Region, Zone string
	// TLS makes the client reach the control plane over TLS (--tls),
	// verified with the system's CAs unless CACert is set; CACert, Cert
	// and Key (--xds-cacert, --xds-cert, --xds-key; Cert and Key go
	// together) are the files of the tls channel credentials (gRFC A65)
	// and imply TLS.
	TLS               bool
	CACert, Cert, Key string
}

// file is a gRPC xDS bootstrap file, the fields Muster's control plane
// needs.
type file struct {
	XDSServers []server `json:"xds_servers"`
	Node       node     `json:"node"`
}

type server struct {
	ServerURI      string        `json:"server_uri"`
	ChannelCreds   []channelCred `json:"channel_creds"`
	ServerFeatures []string      `json:"server_features"`
}

type channelCred struct {
	Type   string          `json:"type"`
	Config *tlsCredsConfig `json:"config,omitempty"`
}

// tlsCredsConfig is the config of "tls" channel credentials (gRFC A65):
// file names; gRPC clients reload the files when they change.
type tlsCredsConfig struct {
	CACertificateFile string `json:"ca_certificate_file,omitempty"`
	CertificateFile   string `json:"certificate_file,omitempty"`
	PrivateKeyFile    string `json:"private_key_file,omitempty"`
}

// node is the bootstrap's node. Its locality is always written, empty for
// a client without one: grpc-js-xds (1.10.1 to 1.14.1 at least) refuses a
// bootstrap whose node has no locality field ("locality field missing in
// node element", validateNode in src/xds-bootstrap.ts), and every client
// reads an empty one as no locality.
type node struct {
	ID       string   `json:"id"`
	Locality locality `json:"locality"`
}

type locality struct {
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// features are the server features of every control plane: xds_v3, and
// ignore_resource_deletion, which keeps a client's instances while a
// control plane restarts.
var features = [...]string{"xds_v3", "ignore_resource_deletion"}

// Marshal returns c's bootstrap, indented JSON, or an error wrapping
// ErrInvalid that names the flag in error.
func Marshal(c Config) ([]byte, error) {
	if c.NodeID == "" {
		return nil, invalid("--node-id: must not be empty")
	}
	if (c.Cert == "") != (c.Key == "") {
		return nil, invalid("--xds-cert and --xds-key go together: give both or neither")
	}
	uris, err := ServerURIs(c.Servers, c.Form)
	if err != nil {
		return nil, err
	}
	creds := channelCred{Type: "insecure"}
	if c.TLS || c.CACert != "" || c.Cert != "" {
		creds.Type = "tls"
		if c.CACert != "" || c.Cert != "" {
			creds.Config = &tlsCredsConfig{CACertificateFile: c.CACert, CertificateFile: c.Cert, PrivateKeyFile: c.Key}
		}
	}
	f := file{Node: node{ID: c.NodeID, Locality: locality{Region: c.Region, Zone: c.Zone}}}
	for _, uri := range uris {
		f.XDSServers = append(f.XDSServers, server{
			ServerURI:      uri,
			ChannelCreds:   []channelCred{creds},
			ServerFeatures: features[:],
		})
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("xds-bootstrap: %w", err)
	}
	return out, nil
}

// ServerURIs returns the server URIs of the bootstrap's xds_servers for
// the control planes servers (host:port each) in form: one server as
// given (whatever the form), several as an address list (FormList) or one
// each (FormFallback).
func ServerURIs(servers []string, form string) ([]string, error) {
	if len(servers) == 0 {
		return nil, invalid("--server: give host:port of the control plane")
	}
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, invalid("--server %q: want host:port of the control plane: %v", s, err)
		}
	}
	switch {
	case form != "" && form != FormList && form != FormFallback:
		return nil, invalid("--form %q: want %s or %s", form, FormList, FormFallback)
	case len(servers) == 1 || form == FormFallback:
		return servers, nil
	case form == FormList:
		return listURI(servers)
	default:
		return nil, invalid("--form: %d control planes need --form %s (one server_uri naming all, for C-core and grpc-js clients) or --form %s (one entry each, gRFC A71)",
			len(servers), FormList, FormFallback)
	}
}

// listURI is the ipv4: (or ipv6:) list target naming every address of
// servers, which must be IP addresses of one family with ports.
func listURI(servers []string) ([]string, error) {
	var scheme string
	addrs := make([]string, len(servers))
	for i, s := range servers {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, invalid("--server %q: --form %s needs IP addresses with ports (for a DNS name resolving to every replica, give that name as the one --server): %v", s, FormList, err)
		}
		family := "ipv6"
		if ap.Addr().Is4() {
			family = "ipv4"
		}
		if scheme != "" && family != scheme {
			return nil, invalid("--server %q: --form %s needs addresses of one family (an %s list cannot hold it)", s, FormList, scheme)
		}
		scheme, addrs[i] = family, ap.String()
	}
	return []string{scheme + ":" + strings.Join(addrs, ",")}, nil
}

// invalidError is an error about a Config, wrapping ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
