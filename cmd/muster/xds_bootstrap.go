package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/internal/xdsbootstrap"
)

func newXDSBootstrapCmd() *cobra.Command {
	var o xdsbootstrap.Config
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
			out, err := xdsbootstrap.Marshal(o)
			if errors.Is(err, xdsbootstrap.ErrInvalid) {
				return &usageError{err: err}
			}
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n", out); err != nil {
				return fmt.Errorf("xds-bootstrap: write: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Servers, "server", nil, "host:port of a control plane (required); repeat it, or separate by commas, for several (see --form)")
	f.StringVar(&o.Form, "form", "", "how several --server go into the bootstrap: list (one server_uri naming all, for C-core and grpc-js clients) or fallback (one xds_servers entry each, gRFC A71)")
	f.StringVar(&o.NodeID, "node-id", "", "the client's node ID, as the control plane logs it (required)")
	f.StringVar(&o.Zone, "zone", "", "the client's zone; empty: no zone preference")
	f.StringVar(&o.Region, "region", "", "the client's region, the zone's; empty: no region preference")
	f.BoolVar(&o.TLS, "tls", false, "reach the control plane over TLS (implied by --xds-cacert, --xds-cert)")
	f.StringVar(&o.CACert, "xds-cacert", "", "CA file (PEM) the client verifies the control plane's certificate with; default: the system's CAs")
	f.StringVar(&o.Cert, "xds-cert", "", "the client's certificate file (PEM), for a control plane that requires one")
	f.StringVar(&o.Key, "xds-key", "", "private key file of --xds-cert (PEM)")
	return cmd
}
