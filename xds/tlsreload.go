package xds

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/musterhq/muster/internal/reload"
)

// certReloader serves the TLS configuration of a set of files, read again
// when a handshake finds that one of them changed (see WithTLSFiles).
//
// A stat of each file per handshake costs microseconds, against the
// milliseconds of the handshake's own cryptography, and xDS clients keep
// one long-lived stream each: looking at every handshake makes a rotation
// visible to the very next connection.
type certReloader struct {
	files tlsFiles
	log   *slog.Logger
	st    *stats
	src   *reload.Source[*tls.Config] // from the last files that loaded
}

// newCertReloader reads the files; an error is an error of New.
func newCertReloader(files tlsFiles, log *slog.Logger, st *stats) (*certReloader, error) {
	var names []string
	for _, name := range []string{files.cert, files.key, files.clientCA} {
		if name != "" {
			names = append(names, name)
		}
	}
	src, err := reload.New(files.load, 0, names...)
	if err != nil {
		return nil, err
	}
	return &certReloader{files: files, log: log, st: st, src: src}, nil
}

// configForClient is the tls.Config.GetConfigForClient of the listener: the
// configuration of the current files, or of the last files that loaded.
func (r *certReloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	cfg, changed, err := r.src.Get(time.Now())
	if err != nil {
		r.st.tlsReloadErrors.Add(1)
		r.log.Error("xds: TLS files changed but do not load; new connections keep the last good certificate until the files change again",
			"cert", r.files.cert, "key", r.files.key, "client_ca", r.files.clientCA, "error", err)
	}
	if changed {
		r.st.tlsReloads.Add(1)
		attrs := []any{"cert", r.files.cert, "client_ca", r.files.clientCA}
		if leaf := cfg.Certificates[0].Leaf; leaf != nil {
			attrs = append(attrs, "subject", leaf.Subject.String(), "issuer", leaf.Issuer.String(), "not_after", leaf.NotAfter)
		}
		r.log.Info("xds: TLS files reloaded; new connections get the new certificate", attrs...)
	}
	return cfg, nil
}
