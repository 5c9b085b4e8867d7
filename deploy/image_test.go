package deploy

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/musterhq/muster/deploy/image"
)

// The image built from the static muster (as the Containerfile builds
// it) is an OCI layout whose config runs the binary as a user other than
// root; the binary in its layer is static (no interpreter, no dynamic
// section: it runs on an empty base) and runs; and the Containerfile
// describes the same image (its final stage copies the same files onto
// scratch, with the same user and entry point, from a CGO_ENABLED=0
// build).
func TestImage(t *testing.T) {
	ca := "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(ca); err != nil {
		if inCI() {
			t.Fatalf("%s: %v (Debian's ca-certificates)", ca, err)
		}
		t.Skipf("%s: %v (Debian's ca-certificates)", ca, err)
	}
	dir := t.TempDir()
	digest, err := image.Write(dir, image.Config{Binary: muster(t), CABundle: ca, Ref: "muster:test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, err := p.Image(digest)
	if err != nil {
		t.Fatalf("the layout does not hold the image %s: %v", digest, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := strings.Cut(cfg.Config.User, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("the image runs as %q: want a user other than root", cfg.Config.User)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{image.Binary}) || cfg.OS != "linux" {
		t.Errorf("entry point %q on %s, want [%s] on linux", cfg.Config.Entrypoint, cfg.OS, image.Binary)
	}

	// The files of the image, the binary written out to run it.
	bin := filepath.Join(t.TempDir(), "muster")
	var files []string
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		files = append(files, "/"+h.Name)
		if "/"+h.Name == image.Binary {
			if h.Mode&0o111 == 0 {
				t.Errorf("%s: mode %o, not executable", image.Binary, h.Mode)
			}
			f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	checkStatic(t, bin)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "muster ") {
		t.Errorf("the image's muster version: %v %q", err, out)
	}
	checkContainerfile(t, files, cfg.Config.User, cfg.Config.Entrypoint)
}

// checkStatic fails t if the ELF file at path needs a dynamic loader: a
// program interpreter (PT_INTERP) or a dynamic section.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v program header: not static, it cannot run on an empty base", path, p.Type)
		}
	}
	if f.Section(".dynamic") != nil || f.Section(".interp") != nil {
		t.Errorf("%s has a dynamic section: not static", path)
	}
}

// checkContainerfile checks that Containerfile's final stage builds the
// image the test built: the same files copied onto scratch, the same
// user and entry point, from a CGO_ENABLED=0 build.
func checkContainerfile(t *testing.T, files []string, user string, entrypoint []string) {
	t.Helper()
	f, err := os.Open("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var copied []string
	var from, cfUser string
	var cfEntry []string
	static := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			copied, from, cfUser, cfEntry = nil, rest, "", nil
		case "RUN":
			static = static || strings.Contains(rest, "CGO_ENABLED=0 go build")
		case "COPY":
			fields := strings.Fields(rest)
			copied = append(copied, fields[len(fields)-1])
		case "USER":
			cfUser = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &cfEntry); err != nil {
				t.Errorf("Containerfile: ENTRYPOINT %s: want the exec (JSON) form: %v", rest, err)
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	slices.Sort(copied)
	switch {
	case from != "scratch":
		t.Errorf("Containerfile: the final stage is FROM %s, want scratch", from)
	case !static:
		t.Error("Containerfile: no CGO_ENABLED=0 go build: the binary would not be static")
	case !slices.Equal(copied, files):
		t.Errorf("Containerfile copies %q, the built image holds %q", copied, files)
	case cfUser != user || !slices.Equal(cfEntry, entrypoint):
		t.Errorf("Containerfile: USER %q, ENTRYPOINT %q; the built image: %q, %q", cfUser, cfEntry, user, entrypoint)
	}
	if uid, _, _ := strings.Cut(cfUser, ":"); uid != strconv.Itoa(65532) {
		t.Errorf("Containerfile: USER %q, want 65532", cfUser)
	}
}
