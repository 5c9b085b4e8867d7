// Command muster-image builds the muster container image as an OCI image
// layout, without a container builder: the image deploy/Containerfile
// describes. Run it in deploy/:
//
//	go run ./cmd/muster-image -out muster-oci
//
// It builds a static muster from the repository (CGO_ENABLED=0), or takes
// the one -binary names. The layout loads with "skopeo copy
// oci:muster-oci docker://REGISTRY/muster:TAG" or "podman load".
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/musterhq/muster/deploy/image"
)

func main() {
	out := flag.String("out", "muster-oci", "directory of the OCI image layout to write")
	binary := flag.String("binary", "", "a static muster binary for linux; default: built from ../cmd/muster with CGO_ENABLED=0")
	ca := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to include")
	arch := flag.String("arch", "", "the image's architecture (a GOARCH); default: this machine's")
	flag.Parse()
	if err := run(*out, *binary, *ca, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "muster-image:", err)
		os.Exit(1)
	}
}

func run(out, binary, ca, arch string) error {
	if binary == "" {
		tmp, err := os.MkdirTemp("", "muster-image")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		binary = filepath.Join(tmp, "muster")
		build := exec.Command("go", "build", "-trimpath", "-o", binary, "./cmd/muster")
		build.Dir = ".."
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if arch != "" {
			build.Env = append(build.Env, "GOARCH="+arch)
		}
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build: %w", err)
		}
	}
	digest, err := image.Write(out, image.Config{Binary: binary, CABundle: ca, Arch: arch})
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s\n", out, digest)
	return nil
}
