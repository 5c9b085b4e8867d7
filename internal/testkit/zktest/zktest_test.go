package zktest_test

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ruok asks a server through addr whether it is alive.
func ruok(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	n, _ := c.Read(buf)
	return string(buf[:n])
}

func TestStandaloneKillRestart(t *testing.T) {
	c := zktest.Start(t)
	s := c.Servers()[0]
	if m := s.Mode(); m != "standalone" {
		t.Fatalf("mode %q, want standalone", m)
	}
	if got := ruok(t, s.Addr()); got != "imok" {
		t.Fatalf("ruok through the proxy = %q", got)
	}
	s.Kill()
	if m := s.Mode(); m != "" {
		t.Fatalf("killed server answers mode %q", m)
	}
	s.Restart(t)
	if got := ruok(t, s.Addr()); got != "imok" {
		t.Fatalf("ruok after restart = %q", got)
	}
}

func TestEnsembleHasOneLeader(t *testing.T) {
	c := zktest.Start(t, zktest.WithServers(3))
	leaders := 0
	for _, s := range c.Servers() {
		switch s.Mode() {
		case "leader":
			leaders++
		case "follower":
		default:
			t.Fatalf("server %s in mode %q", s.DirectAddr(), s.Mode())
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders", leaders)
	}
	s := c.Servers()[0]
	s.Freeze(t)
	s.Thaw(t)
}
