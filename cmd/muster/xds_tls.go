package main

import (
	"github.com/spf13/cobra"

	"github.com/musterhq/muster/xds"
)

// xdsTLS are the TLS flags of the xDS listener (muster xds, muster serve
// --xds-listen), named like the etcd flags (--cacert, --cert, --key) with
// an xds- prefix: the server's certificate and key, and the CA that signs
// the clients' certificates.
type xdsTLS struct {
	cert, key, cacert string
}

func (x *xdsTLS) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&x.cert, "xds-cert", "", "certificate file of the xDS listener (PEM); with --xds-key, ADS is served over TLS. The TLS files are read again when they change (new connections get the new certificate; a change that does not load is logged and the last good one kept)")
	f.StringVar(&x.key, "xds-key", "", "private key file of --xds-cert (PEM)")
	f.StringVar(&x.cacert, "xds-cacert", "", "CA file (PEM) that signs xDS clients' certificates; when given, clients must present a certificate it verifies")
}

// validate checks that the flags go together; its errors are usage errors.
func (x xdsTLS) validate() error {
	if (x.cert == "") != (x.key == "") {
		return usageErrorf("--xds-cert and --xds-key go together: give both or neither")
	}
	if x.cacert != "" && x.cert == "" {
		return usageErrorf("--xds-cacert needs --xds-cert and --xds-key: client certificates are checked over TLS only")
	}
	return nil
}

// enabled reports whether ADS is served over TLS.
func (x xdsTLS) enabled() bool { return x.cert != "" }

// mode describes the listener's security for the log.
func (x xdsTLS) mode() string {
	switch {
	case x.cacert != "":
		return "TLS, client certificates required"
	case x.cert != "":
		return "TLS"
	}
	return "plaintext"
}

// option returns the control plane's option that serves TLS with the files
// (read by xds.New, and again when they change), or nil when TLS is not
// asked for.
func (x xdsTLS) option() xds.Option {
	if !x.enabled() {
		return nil
	}
	return xds.WithTLSFiles(x.cert, x.key, x.cacert)
}
