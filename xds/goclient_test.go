package xds_test

import (
	"context"
	"fmt"
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

	"github.com/musterhq/muster/internal/greeterpb"
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
	type burst struct {
		n   int
		gap time.Duration
	}
	bursts := make(chan burst, 16)
	c := &childClient{name: "the in-process Go client", calls: make(chan clientCall, 1024), stderr: &lockedBuffer{},
		command: func(line string) error {
			var b burst
			var gap int
			if _, err := fmt.Sscanf(line, "burst %d %d", &b.n, &gap); err != nil || b.n < 1 || gap < 0 {
				return fmt.Errorf("%q is not burst N GAP", line)
			}
			b.gap = time.Duration(gap) * time.Millisecond
			bursts <- b
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	gc := greeterpb.NewGreeterClient(conn)
	call := func(n int) clientCall {
		pairs := metadata.MD{}
		for _, kv := range md {
			k, v, _ := strings.Cut(kv, "=")
			pairs.Append(k, strings.ReplaceAll(v, "{n}", strconv.Itoa(n)))
		}
		cctx, ccancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, pairs), 2*time.Second)
		defer ccancel()
		t0 := time.Now()
		reply, err := gc.SayHello(cctx, &greeterpb.HelloRequest{Name: "go"})
		call := clientCall{N: n, OK: err == nil, By: reply.GetServedBy(), MS: float64(time.Since(t0).Microseconds()) / 1000}
		if err != nil {
			call.Code, call.Error = int(status.Code(err)), err.Error()
		}
		return call
	}
	send := func(calls ...clientCall) bool {
		for _, call := range calls {
			select {
			case c.calls <- call:
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.calls)
		n, made := 0, 0 // calls, bursts
		for {
			n++
			one := call(n)
			if ctx.Err() != nil || !send(one) {
				return
			}
			select {
			case b := <-bursts:
				made++
				calls := make([]clientCall, b.n)
				var wg sync.WaitGroup
				for i := range calls {
					if i > 0 {
						time.Sleep(b.gap) // the client's pacing, as the child clients'
					}
					n++
					id := n
					wg.Go(func() {
						calls[i] = call(id)
						calls[i].Burst = made
					})
				}
				wg.Wait()
				if ctx.Err() != nil || !send(calls...) {
					return
				}
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
