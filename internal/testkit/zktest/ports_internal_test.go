package zktest

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A server whose client port another process took exits; Start must see
// why (errPortTaken), to start again on fresh ports.
func TestTakenPortIsReported(t *testing.T) {
	Require(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := newProxy()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{id: 1, dir: filepath.Join(dir, "zk1"), proxy: p}
	s.cfg, s.logFile = filepath.Join(s.dir, "zoo.cfg"), filepath.Join(s.dir, "server.log")
	c := &Cluster{servers: []*Server{s}}
	defer c.close()
	ports := freePorts(t, 3)
	ports[0] = ln.Addr().(*net.TCPAddr).Port
	if err := c.configure(options{servers: 1, tickTime: 100 * time.Millisecond}, ports); err != nil {
		t.Fatal(err)
	}
	if err := c.startAll(); !errors.Is(err, errPortTaken) {
		t.Fatalf("startAll with the client port taken = %v, want errPortTaken", err)
	}
}
