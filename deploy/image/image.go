// Package image builds the muster container image as an OCI image
// layout, from a muster binary, without a container builder: the image
// deploy/Containerfile describes (the same files, user and entry point),
// for machines where buildah, podman or docker cannot run or pull.
package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's shape, as deploy/Containerfile states it.
const (
	// Binary is where the image holds the muster command, its entry point.
	Binary = "/usr/local/bin/muster"
	// CABundle is where the image holds the CA certificates Go's TLS
	// reads on Linux when no --cacert is given.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// Passwd names the image's user, for what looks the user up.
	Passwd = "/etc/passwd"
	// User is the user and group the image runs as: not root.
	User = "65532:65532"
	// PasswdLine is the whole of the image's /etc/passwd.
	PasswdLine = "muster:x:65532:65532:muster:/nonexistent:/sbin/nologin\n"
)

// Config is what Write builds the image from.
type Config struct {
	// Binary is the path of a static muster binary for linux (required).
	Binary string
	// CABundle is the path of the CA bundle to include (required).
	CABundle string
	// Arch is the image's architecture, GOARCH's name; "" for this
	// machine's.
	Arch string
	// Ref names the image in the layout's index
	// (org.opencontainers.image.ref.name); "" for "muster".
	Ref string
}

// Write writes the image as an OCI image layout in dir (created if
// missing; an image already there stays, beside the new one) and returns
// its digest.
func Write(dir string, c Config) (v1.Hash, error) {
	if c.Binary == "" || c.CABundle == "" {
		return v1.Hash{}, errors.New("image: Config.Binary and Config.CABundle are required")
	}
	if c.Arch == "" {
		c.Arch = runtime.GOARCH
	}
	if c.Ref == "" {
		c.Ref = "muster"
	}
	files := []file{{CABundle, c.CABundle, 0o644, nil}, {Passwd, "", 0o644, []byte(PasswdLine)}, {Binary, c.Binary, 0o755, nil}}
	layerTar, err := tarOf(files)
	if err != nil {
		return v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", c.Arch
	cfg.Config.User = User
	cfg.Config.Entrypoint = []string{Binary}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return v1.Hash{}, fmt.Errorf("image: %w", err)
		}
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": c.Ref}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: c.Arch})); err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	return img.Digest()
}

// file is one file of the layer: read from src, or data when src is "".
type file struct {
	path, src string
	mode      int64
	data      []byte
}

// tarOf is the layer's tar: files with their parent directories, owned
// by root, dated at the epoch so that the same files make the same layer.
func tarOf(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		for _, d := range parents(f.path) {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
					return nil, fmt.Errorf("image: %w", err)
				}
			}
		}
		data := f.data
		if f.src != "" {
			var err error
			if data, err = os.ReadFile(f.src); err != nil {
				return nil, fmt.Errorf("image: %w", err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path[1:], Mode: f.mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return buf.Bytes(), nil
}

// parents are the directories above an absolute path, outermost first,
// without their leading "/": "/usr/local/bin/muster" gives usr,
// usr/local, usr/local/bin.
func parents(path string) []string {
	var ds []string
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			ds = append(ds, path[1:i])
		}
	}
	return ds
}
