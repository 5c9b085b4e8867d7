package xds

import (
	"crypto/tls"
	"log/slog"
	"os"
	"sync"
)

// certReloader serves the TLS configuration of a set of files, read again
// when a handshake finds that one of them changed (see WithTLSFiles).
//
// A stat of each file per handshake costs microseconds, against the
// milliseconds of the handshake's own cryptography, and xDS clients keep
// one long-lived stream each: checking at every handshake needs no timer
// and makes a rotation visible to the very next connection.
type certReloader struct {
	files tlsFiles
	log   *slog.Logger
	st    *stats

	mu    sync.Mutex
	stamp [3]fileStamp // of the files when last read, loaded or not
	cfg   *tls.Config  // from the last files that loaded
}

// fileStamp identifies a version of a file: the file (a file replaced by a
// rename is another file), its size and modification time; nil when the
// file cannot be read or is not configured.
type fileStamp = os.FileInfo

// sameStamps reports whether two sets of stamps identify the same files.
func sameStamps(a, b [3]fileStamp) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()):
			return false
		}
	}
	return true
}

// newCertReloader reads the files; an error is an error of New.
func newCertReloader(files tlsFiles, log *slog.Logger, st *stats) (*certReloader, error) {
	r := &certReloader{files: files, log: log, st: st}
	r.stamp = r.stamps()
	cfg, err := files.load()
	if err != nil {
		return nil, err
	}
	r.cfg = cfg
	return r, nil
}

func (r *certReloader) stamps() [3]fileStamp {
	var s [3]fileStamp
	for i, name := range [3]string{r.files.cert, r.files.key, r.files.clientCA} {
		if name == "" {
			continue
		}
		if fi, err := os.Stat(name); err == nil {
			s[i] = fi
		}
	}
	return s
}

// configForClient is the tls.Config.GetConfigForClient of the listener: the
// configuration of the current files, or of the last files that loaded.
func (r *certReloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.stamps()
	if sameStamps(now, r.stamp) {
		return r.cfg, nil
	}
	// Stamped before reading: a file that changes while it is read is
	// read again at the next handshake.
	r.stamp = now
	cfg, err := r.files.load()
	if err != nil {
		r.st.tlsReloadErrors.Add(1)
		r.log.Error("xds: TLS files changed but do not load; new connections keep the last good certificate until the files change again",
			"cert", r.files.cert, "key", r.files.key, "client_ca", r.files.clientCA, "error", err)
		return r.cfg, nil
	}
	r.cfg = cfg
	r.st.tlsReloads.Add(1)
	attrs := []any{"cert", r.files.cert, "client_ca", r.files.clientCA}
	if leaf := cfg.Certificates[0].Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "issuer", leaf.Issuer.String(), "not_after", leaf.NotAfter)
	}
	r.log.Info("xds: TLS files reloaded; new connections get the new certificate", attrs...)
	return cfg, nil
}
