//go:build linux

package admission

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
)

// An admitted TCP connection reads on readiness: the bytes sent, in a
// buffer from the pool; io.EOF once the peer closed it; the deadline's
// error when it passes.
func TestReadOnReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(lis, &Pool{What: "connections", Max: 4, Share: 4}, nil)
	defer l.Close()
	peer, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, ok := c.(interface {
		ReadOnReady(int, mem.BufferPool) (*[]byte, int, error)
	})
	if !ok {
		t.Fatalf("an admitted connection (%T) does not read on readiness", c)
	}
	pool := mem.DefaultBufferPool()

	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, _, err := r.ReadOnReady(64, pool); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf, n, err := r.ReadOnReady(64, pool)
	if err != nil || string((*buf)[:n]) != "hello" {
		t.Fatalf("read %d bytes, %v; want hello", n, err)
	}
	pool.Put(buf)
	_ = peer.Close()
	if buf, n, err := r.ReadOnReady(64, pool); buf != nil || n != 0 || err != io.EOF {
		t.Errorf("after the peer closed: %v, %d, %v; want nil, 0, io.EOF", buf, n, err)
	}
}

// gRPC's transport reads an admitted connection without a read buffer of
// its own: 256 idle connections through the Listener take no more heap
// than 256 through the bare listener, within half of that buffer (32 KiB
// a connection, which each connection held before conn read on
// readiness). Both ends of every connection are in this process, the
// same in both runs.
func TestAdmittedConnectionsHoldNoReadBuffer(t *testing.T) {
	const n = 256
	perConn := func(admit bool) float64 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if admit {
			lis = NewListener(lis, &Pool{What: "connections", Max: n, Share: n}, nil)
		}
		g := grpc.NewServer()
		healthpb.RegisterHealthServer(g, health.NewServer())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = g.Serve(lis)
		}()
		defer func() { g.Stop(); <-done }()
		before := heapInUse()
		conns := make([]*grpc.ClientConn, n)
		for i := range conns {
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = cc
		}
		return float64(heapInUse()-before) / n
	}
	perConn(false) // once first: what the first connections of a process allocate once
	bare, admitted := perConn(false), perConn(true)
	t.Logf("heap per idle connection (both ends): %.1f KiB bare, %.1f KiB admitted", bare/1024, admitted/1024)
	if admitted-bare > 16<<10 {
		t.Errorf("an admitted connection takes %.1f KiB more heap than a bare one, want under 16 KiB", (admitted-bare)/1024)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
