package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
)

// bootstrapOptions are the flags of muster xds-bootstrap.
type bootstrapOptions struct {
	// servers are the control planes (--server, repeatable), written in
	// the form named by form when there are several.
	servers []string
	form    string
	nodeID  string
	region  string
	zone    string
	// TLS to the control plane: tls alone trusts the system's CAs;
	// cacert, cert and key are the files of the bootstrap's tls
	// channel credentials (gRFC A65) and imply tls.
	tls               bool
	cacert, cert, key string
}

// xdsBootstrap is a gRPC xDS bootstrap file (gRFC A27), the fields Muster's
// control plane needs.
type xdsBootstrap struct {
	XDSServers []xdsServer   `json:"xds_servers"`
	Node       bootstrapNode `json:"node"`
}

type xdsServer struct {
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

type bootstrapNode struct {
	ID       string             `json:"id"`
	Locality *bootstrapLocality `json:"locality,omitempty"`
}

type bootstrapLocality struct {
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

func newXDSBootstrapCmd() *cobra.Command {
	o := bootstrapOptions{}
	cmd := &cobra.Command{
		Use:   "xds-bootstrap",
		Short: "Print an xDS bootstrap file for gRPC clients of muster xds",
		Long: `Xds-bootstrap prints the JSON bootstrap a gRPC client needs to resolve
xds:///<service> through a Muster control plane (muster xds, or muster serve
--xds-listen). Save it to a file and point GRPC_XDS_BOOTSTRAP at it, or put
the JSON itself in GRPC_XDS_BOOTSTRAP_CONFIG. --zone and --region are the
client's locality: it gets the instances of its zone first, those of the
other zones of its region when its zone has none taking calls, and the
rest when its region has none (gRPC moves to the next priority when one
has no READY endpoint). The server feature ignore_resource_deletion keeps a client's
instances while a control plane restarts.

Several control planes (muster xds is stateless; run two or more over one
etcd) go into the bootstrap in one of two forms, chosen with --form:

  list      one xds_servers entry whose server_uri names every replica
            (ipv4:10.0.0.5:18000,10.0.0.6:18000). A client's xDS channel
            moves to another replica when its own dies and keeps getting
            changes. Read by C-core (Python, C++, Ruby, PHP) and grpc-js
            (Node); the --server values must be IP addresses with ports.
  fallback  one xds_servers entry per replica, in order (gRFC A71). A
            client that has all its resources cached stays with the first
            while it is down (it keeps its endpoints but gets no change);
            clients without A71 use the first only.

For grpc-go (which has no ipv4: list) give one --server: a DNS name with an
address per replica (e.g. a headless Kubernetes Service); that works for
every client. See docs/XDS.md, "Running several control planes".

With --tls the client reaches the control plane over TLS (verified with the
system's CAs, or --xds-cacert), presenting --xds-cert/--xds-key if given: the
files' paths go into the bootstrap, so they must be readable by the client.`,
		Example: `  muster xds-bootstrap --server 10.0.0.5:18000 --node-id web-1 --region eu-1 --zone eu-1a > bootstrap.json
  GRPC_XDS_BOOTSTRAP=bootstrap.json ./client   # dials xds:///user
  muster xds-bootstrap --server 10.0.0.5:18000,10.0.0.6:18000 --form list --node-id web-1
  muster xds-bootstrap --server cp.example:18000 --node-id web-1 --xds-cacert ca.pem --xds-cert web.pem --xds-key web-key.pem`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := serverURIs(o.servers, o.form); err != nil {
				return err
			}
			if o.nodeID == "" {
				return usageErrorf("--node-id: must not be empty")
			}
			if (o.cert == "") != (o.key == "") {
				return usageErrorf("--xds-cert and --xds-key go together: give both or neither")
			}
			return writeBootstrap(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.servers, "server", nil, "host:port of a control plane (required); repeat it, or separate by commas, for several (see --form)")
	f.StringVar(&o.form, "form", "", "how several --server go into the bootstrap: list (one server_uri naming all, for C-core and grpc-js clients) or fallback (one xds_servers entry each, gRFC A71)")
	f.StringVar(&o.nodeID, "node-id", "", "the client's node ID, as the control plane logs it (required)")
	f.StringVar(&o.zone, "zone", "", "the client's zone; empty: no zone preference")
	f.StringVar(&o.region, "region", "", "the client's region, the zone's; empty: no region preference")
	f.BoolVar(&o.tls, "tls", false, "reach the control plane over TLS (implied by --xds-cacert, --xds-cert)")
	f.StringVar(&o.cacert, "xds-cacert", "", "CA file (PEM) the client verifies the control plane's certificate with; default: the system's CAs")
	f.StringVar(&o.cert, "xds-cert", "", "the client's certificate file (PEM), for a control plane that requires one")
	f.StringVar(&o.key, "xds-key", "", "private key file of --xds-cert (PEM)")
	return cmd
}

func writeBootstrap(w io.Writer, o bootstrapOptions) error {
	creds := channelCred{Type: "insecure"}
	if o.tls || o.cacert != "" || o.cert != "" {
		creds.Type = "tls"
		if o.cacert != "" || o.cert != "" {
			creds.Config = &tlsCredsConfig{CACertificateFile: o.cacert, CertificateFile: o.cert, PrivateKeyFile: o.key}
		}
	}
	uris, err := serverURIs(o.servers, o.form)
	if err != nil {
		return err
	}
	b := xdsBootstrap{Node: bootstrapNode{ID: o.nodeID}}
	for _, uri := range uris {
		b.XDSServers = append(b.XDSServers, xdsServer{
			ServerURI:      uri,
			ChannelCreds:   []channelCred{creds},
			ServerFeatures: []string{"xds_v3", "ignore_resource_deletion"},
		})
	}
	if o.zone != "" || o.region != "" {
		b.Node.Locality = &bootstrapLocality{Region: o.region, Zone: o.zone}
	}
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return fmt.Errorf("xds-bootstrap: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%s\n", out); err != nil {
		return fmt.Errorf("xds-bootstrap: write: %w", err)
	}
	return nil
}

// The forms of several control planes in a bootstrap (--form).
const (
	// formList is one server URI naming every control plane, an ipv4: or
	// ipv6: list target (C-core and grpc-js).
	formList = "list"
	// formFallback is one xds_servers entry per control plane (gRFC A71).
	formFallback = "fallback"
)

// serverURIs returns the server URIs of the bootstrap's xds_servers for
// the control planes servers (host:port each) in form: one server as
// given (whatever the form), several as an address list (formList) or one
// each (formFallback).
func serverURIs(servers []string, form string) ([]string, error) {
	if len(servers) == 0 {
		return nil, usageErrorf("--server: give host:port of the control plane")
	}
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, usageErrorf("--server %q: want host:port of the control plane: %v", s, err)
		}
	}
	switch {
	case form != "" && form != formList && form != formFallback:
		return nil, usageErrorf("--form %q: want %s or %s", form, formList, formFallback)
	case len(servers) == 1 || form == formFallback:
		return servers, nil
	case form == formList:
		return listURI(servers)
	default:
		return nil, usageErrorf("--form: %d control planes need --form %s (one server_uri naming all, for C-core and grpc-js clients) or --form %s (one entry each, gRFC A71)",
			len(servers), formList, formFallback)
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
			return nil, usageErrorf("--server %q: --form %s needs IP addresses with ports (for a DNS name resolving to every replica, give that name as the one --server): %v", s, formList, err)
		}
		family := "ipv6"
		if ap.Addr().Is4() {
			family = "ipv4"
		}
		if scheme != "" && family != scheme {
			return nil, usageErrorf("--server %q: --form %s needs addresses of one family (an %s list cannot hold it)", s, formList, scheme)
		}
		scheme, addrs[i] = family, ap.String()
	}
	return []string{scheme + ":" + strings.Join(addrs, ",")}, nil
}
