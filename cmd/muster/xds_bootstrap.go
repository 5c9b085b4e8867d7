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
	zone   string
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
	Type string `json:"type"`
}

type bootstrapNode struct {
	ID       string             `json:"id"`
	Locality *bootstrapLocality `json:"locality,omitempty"`
}

type bootstrapLocality struct {
	Zone string `json:"zone"`
}

func newXDSBootstrapCmd() *cobra.Command {
	o := bootstrapOptions{}
	cmd := &cobra.Command{
		Use:   "xds-bootstrap",
		Short: "Print an xDS bootstrap file for gRPC clients of muster xds",
		Long: `Xds-bootstrap prints the JSON bootstrap a gRPC client needs to resolve
xds:///<service> through a Muster control plane (muster xds, or muster serve
--xds-listen). Save it to a file and point GRPC_XDS_BOOTSTRAP at it, or put
the JSON itself in GRPC_XDS_BOOTSTRAP_CONFIG. --zone is the client's zone:
it gets the instances of its zone first and the others when its zone has
none. The server feature ignore_resource_deletion keeps a client's
instances while a control plane restarts.`,
		Example: `  muster xds-bootstrap --server 10.0.0.5:18000 --node-id web-1 --zone eu-1a > bootstrap.json
  GRPC_XDS_BOOTSTRAP=bootstrap.json ./client   # dials xds:///user`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(o.server); err != nil {
				return usageErrorf("--server %q: want host:port of the control plane: %v", o.server, err)
			}
			if o.nodeID == "" {
				return usageErrorf("--node-id: must not be empty")
			}
			return writeBootstrap(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "host:port of the control plane (required)")
	f.StringVar(&o.nodeID, "node-id", "", "the client's node ID, as the control plane logs it (required)")
	f.StringVar(&o.zone, "zone", "", "the client's zone; empty: no zone preference")
	return cmd
}

func writeBootstrap(w io.Writer, o bootstrapOptions) error {
	b := xdsBootstrap{
		XDSServers: []xdsServer{{
			ServerURI:      o.server,
			ChannelCreds:   []channelCred{{Type: "insecure"}},
			ServerFeatures: []string{"xds_v3", "ignore_resource_deletion"},
		}},
		Node: bootstrapNode{ID: o.nodeID},
	}
	if o.zone != "" {
		b.Node.Locality = &bootstrapLocality{Zone: o.zone}
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
