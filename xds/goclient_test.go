package xds_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/demo/greeterpb"
)

// The Go clients: grpc-go of this module in process (the newest Muster
// supports), and testdata/goclient, a program of its own module pinned to
// the oldest grpc-go Muster supports, built once per test binary.

// goClientDir is the floor's Go client, a module of its own.
const goClientDir = "testdata/goclient"

// goFloor builds the floor's Go client once.
var goFloor struct {
	once sync.Once
	dir  string // a temporary directory holding the binary; removed by TestMain
	bin  string
	err  error
	out  []byte
}

// goFloorClient returns the path of the floor's Go client, building it on
// first use; a build that fails fails the test, with the build's output.
func goFloorClient(t testing.TB) string {
	t.Helper()
	goFloor.once.Do(func() {
		if goFloor.dir, goFloor.err = os.MkdirTemp("", "muster-goclient-"); goFloor.err != nil {
			return
		}
		goFloor.bin = filepath.Join(goFloor.dir, "goclient")
		cmd := exec.Command("go", "build", "-o", goFloor.bin, ".")
		cmd.Dir = goClientDir
		goFloor.out, goFloor.err = cmd.CombinedOutput()
	})
	if goFloor.err != nil {
		t.Fatalf("build the floor's Go client (cd %s && go build .): %v\n%s", goClientDir, goFloor.err, goFloor.out)
	}
	return goFloor.bin
}

// removeGoFloorClient removes what goFloorClient built.
func removeGoFloorClient() {
	if goFloor.dir != "" {
		_ = os.RemoveAll(goFloor.dir)
	}
}

// goFloorVersion returns the grpc-go version the floor's client pins.
func goFloorVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goClientDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "google.golang.org/grpc" {
			return strings.TrimPrefix(f[1], "v")
		}
	}
	t.Fatalf("%s/go.mod names no google.golang.org/grpc", goClientDir)
	return ""
}

// goFloorProcess runs the floor's Go client with the bootstrap boot and
// metadata md.
func goFloorProcess(t testing.TB, boot string, every time.Duration, md []string) *childClient {
	t.Helper()
	cmd := exec.Command(goFloorClient(t), append([]string{"xds:///greeter", millis(every)}, md...)...)
	return startChild(t, "the floor's Go client", cmd, boot)
}

// goInProcess is a grpc-go xDS client in this process, with a resolver of
// its own (an xDS client of its own, so its own ADS stream) on the
// bootstrap boot, calling in a loop as the child clients do and handing its
// calls over in the same form. Its goroutine ends at the test's cleanup.
func goInProcess(t testing.TB, boot string, every time.Duration, md []string) *childClient {
	t.Helper()
	b, err := xdsResolverFor(boot)
	if err != nil {
		t.Fatalf("xDS resolver: %v", err)
	}
	conn := dialWith(t, b, "greeter")
	c := &childClient{name: "the in-process Go client", calls: make(chan clientCall, 1024), stderr: &lockedBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.calls)
		gc := greeterpb.NewGreeterClient(conn)
		for n := 1; ; n++ {
			pairs := metadata.MD{}
			for _, kv := range md {
				k, v, _ := strings.Cut(kv, "=")
				pairs.Append(k, strings.ReplaceAll(v, "{n}", strconv.Itoa(n)))
			}
			cctx, ccancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, pairs), 2*time.Second)
			reply, err := gc.SayHello(cctx, &greeterpb.HelloRequest{Name: "go"})
			ccancel()
			if ctx.Err() != nil {
				return
			}
			call := clientCall{N: n, OK: err == nil, By: reply.GetServedBy()}
			if err != nil {
				call.Code, call.Error = int(status.Code(err)), err.Error()
			}
			select {
			case c.calls <- call:
			case <-ctx.Done():
				return
			}
			select {
			case <-time.After(every):
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}
