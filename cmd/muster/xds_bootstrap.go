package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/spf13/cobra"
)

// bootstrapOptions are the flags of muster xds-bootstrap.
type bootstrapOptions struct {
	server string
	nodeID string
	region string
	zone   string
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

With --tls the client reaches the control plane over TLS (verified with the
system's CAs, or --xds-cacert), presenting --xds-cert/--xds-key if given: the
files' paths go into the bootstrap, so they must be readable by the client.`,
		Example: `  muster xds-bootstrap --server 10.0.0.5:18000 --node-id web-1 --region eu-1 --zone eu-1a > bootstrap.json
  GRPC_XDS_BOOTSTRAP=bootstrap.json ./client   # dials xds:///user
  muster xds-bootstrap --server cp.example:18000 --node-id web-1 --xds-cacert ca.pem --xds-cert web.pem --xds-key web-key.pem`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(o.server); err != nil {
				return usageErrorf("--server %q: want host:port of the control plane: %v", o.server, err)
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
	f.StringVar(&o.server, "server", "", "host:port of the control plane (required)")
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
	b := xdsBootstrap{
		XDSServers: []xdsServer{{
			ServerURI:      o.server,
			ChannelCreds:   []channelCred{creds},
			ServerFeatures: []string{"xds_v3", "ignore_resource_deletion"},
		}},
		Node: bootstrapNode{ID: o.nodeID},
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
