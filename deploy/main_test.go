package deploy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// binaryDir is where the tests build the muster command, once; removed
// when they end.
var binaryDir = filepath.Join(os.TempDir(), "muster-deploy-test-"+strconv.Itoa(os.Getpid()))

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = os.RemoveAll(binaryDir) }))
}

var build struct {
	once sync.Once
	path string
	err  error
}

// muster returns the path of the muster command built from this
// repository as the Containerfile builds it: static (CGO_ENABLED=0),
// without the build's paths. The first call builds it.
func muster(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.path = filepath.Join(binaryDir, "muster")
		cmd := exec.Command("go", "build", "-trimpath", "-o", build.path, "./cmd/muster")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = errors.New("go build ./cmd/muster: " + err.Error() + "\n" + string(out))
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// inCI reports whether the tests run in CI, where a missing tool is a
// failure rather than a reason to skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// needTool returns the path of the tool name, skipping the test when it
// is not installed, or failing it in CI (.ci/run installs it).
func needTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if inCI() {
		t.Fatalf("%s is not installed (Debian's %s; .ci/run installs it): %v", name, debianPackage, err)
	}
	t.Skipf("%s is not installed (Debian's %s): %v", name, debianPackage, err)
	return ""
}

// acceptsArgs fails t unless the muster command accepts args (a command
// and its flags): it parses them, with --help, which stops before the
// command runs. env is the command's environment (KEY=VALUE). It returns
// the help text, or "" when the command refuses args.
func acceptsArgs(t *testing.T, args, env []string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(muster(t), append(append([]string{}, args...), "--help")...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("muster %s: the command refuses these arguments (%v):\n%s", strings.Join(args, " "), err, stderr.String())
		return ""
	}
	return stdout.String()
}

// freePort returns a TCP port free on loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a muster command running as a child process, stopped (by
// SIGTERM, as systemd and Kubernetes stop it) when the test ends.
type process struct {
	cmd  *exec.Cmd
	log  string // the file of its stdout and stderr
	done chan struct{}
}

// output is what the process wrote so far.
func (p *process) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// start runs the muster command with args and env. When the test ends it
// sends SIGTERM and expects the process to exit 0 within a minute.
func start(t *testing.T, args, env []string) *process {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "output")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the child has its own copy
	p := &process{log: out.Name(), done: make(chan struct{})}
	p.cmd = exec.Command(muster(t), args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	go func() { waitErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("muster %s did not stop within a minute of SIGTERM; output:\n%s", strings.Join(args, " "), p.output())
			return
		}
		if waitErr != nil {
			t.Errorf("muster %s: %v after SIGTERM; output:\n%s", strings.Join(args, " "), waitErr, p.output())
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// registry starts "muster serve" (an embedded etcd) on free loopback
// ports and returns its client endpoint once it answers.
func registry(t *testing.T) string {
	t.Helper()
	client, peer := freePort(t), freePort(t)
	endpoint := "http://127.0.0.1:" + strconv.Itoa(client)
	p := start(t, []string{"serve", "--data-dir", t.TempDir(),
		"--listen-client-url", endpoint, "--listen-peer-url", "http://127.0.0.1:" + strconv.Itoa(peer),
		"--metrics-listen", ""}, os.Environ())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		out, err := exec.CommandContext(ctx, muster(t), "ls", "--endpoints", endpoint).CombinedOutput()
		if err == nil {
			return endpoint
		}
		if p.exited() || ctx.Err() != nil {
			t.Fatalf("muster serve did not answer within a minute (last: %v %s); output:\n%s", err, out, p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
