package zktest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/proctest"
)

// Jar is the ZooKeeper server jar of Debian's zookeeper package (its
// manifest names the jars it depends on); SLF4JBinding routes the server's
// logs to a file.
const (
	Jar          = "/usr/share/java/zookeeper.jar"
	SLF4JBinding = "/usr/share/java/slf4j-simple.jar"
	mainClass    = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// StartTimeout bounds how long Start and Restart wait for servers to
// serve: a JVM starts slowly on a loaded machine.
const StartTimeout = 90 * time.Second

// Available reports why ZooKeeper servers cannot be started here, or nil.
func Available() error {
	for _, f := range []string{Jar, SLF4JBinding} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("zktest: %w (install Debian's zookeeper package)", err)
		}
	}
	if _, err := exec.LookPath("java"); err != nil {
		return fmt.Errorf("zktest: %w (install a Java runtime)", err)
	}
	return nil
}

// Require skips t when ZooKeeper is not available, or fails it when the
// environment variable CI is "true".
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI must run the ZooKeeper tests", err)
		}
		t.Skipf("%v; skipping the ZooKeeper test", err)
	}
}

type options struct {
	servers  int
	tickTime time.Duration
}

// Option configures Start.
type Option func(*options)

// WithServers sets the number of servers (default 1, standalone; 3 makes an
// ensemble).
func WithServers(n int) Option { return func(o *options) { o.servers = n } }

// WithTickTime sets the servers' tick (default 100ms). ZooKeeper bounds a
// session's timeout to [2, 600] ticks here.
func WithTickTime(d time.Duration) Option { return func(o *options) { o.tickTime = d } }

// Cluster is a running standalone server or ensemble.
type Cluster struct {
	servers []*Server
}

// Server is one ZooKeeper server process.
type Server struct {
	id      int
	dir     string
	cfg     string
	client  int // direct client port
	proxy   *proxy
	logFile string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start runs a ZooKeeper server (or ensemble) and returns once every server
// serves. The servers are killed and their proxies closed with t.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	Require(t)
	o := options{servers: 1, tickTime: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if o.servers < 1 {
		t.Fatalf("zktest: WithServers(%d): at least one server", o.servers)
	}
	// TempDir's removal is a cleanup too: made first, it runs after the
	// servers are killed (cleanups run last-in first-out).
	root := t.TempDir()
	c := &Cluster{}
	t.Cleanup(c.close)
	for i := 0; i < o.servers; i++ {
		// The proxies bind their own ports first, so that freePorts
		// cannot pick them.
		p, err := newProxy()
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{id: i + 1, dir: filepath.Join(root, fmt.Sprintf("zk%d", i+1)), proxy: p}
		s.cfg = filepath.Join(s.dir, "zoo.cfg")
		s.logFile = filepath.Join(s.dir, "server.log")
		c.servers = append(c.servers, s)
	}
	// freePorts must close its listeners before the servers bind, so
	// another process can take a port meanwhile: then start again on
	// fresh ports.
	for attempt := 1; ; attempt++ {
		if err := c.configure(o, freePorts(t, 3*o.servers)); err != nil {
			t.Fatal(err)
		}
		err := c.startAll()
		if err == nil {
			return c
		}
		if !errors.Is(err, errPortTaken) || attempt == maxStartAttempts {
			t.Fatal(err)
		}
		t.Logf("%v; starting again on fresh ports", err)
		for _, s := range c.servers {
			s.kill()
		}
	}
}

// maxStartAttempts bounds Start's attempts on fresh ports.
const maxStartAttempts = 3

// errPortTaken marks a server that exited because a port of its
// configuration was taken.
var errPortTaken = errors.New("zktest: a server's port was taken")

// configure writes every server's configuration and empty data directory
// for ports (3 per server: client, quorum, election) and points the
// proxies at the client ports.
func (c *Cluster) configure(o options, ports []int) error {
	var quorum strings.Builder
	if len(c.servers) > 1 {
		for i := range c.servers {
			fmt.Fprintf(&quorum, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	for i, s := range c.servers {
		s.client = ports[3*i]
		s.proxy.retarget(s.DirectAddr())
		if err := os.RemoveAll(s.dir); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
			return err
		}
		ticks := int(o.tickTime / time.Millisecond)
		cfg := fmt.Sprintf("tickTime=%d\ninitLimit=50\nsyncLimit=10\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\nforceSync=no\nminSessionTimeout=%d\nmaxSessionTimeout=%d\n%s",
			ticks, filepath.Join(s.dir, "data"), s.client, 2*ticks, 600*ticks, quorum.String())
		if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), []byte(fmt.Sprint(s.id)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startAll starts every server and waits until each serves; its error
// wraps errPortTaken when a server exited for a taken port.
func (c *Cluster) startAll() error {
	for _, s := range c.servers {
		if err := s.start(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(StartTimeout)
	for _, s := range c.servers {
		if err := s.waitServing(time.Until(deadline), c.servers...); err != nil {
			return err
		}
	}
	return nil
}

// Servers returns the servers, in the order of their IDs (1..n).
func (c *Cluster) Servers() []*Server { return c.servers }

// Addrs returns every server's client address through its proxy.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// DirectAddrs returns every server's client address, bypassing the
// proxies.
func (c *Cluster) DirectAddrs() []string {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.DirectAddr()
	}
	return addrs
}

func (c *Cluster) close() {
	for _, s := range c.servers {
		s.kill()
		s.proxy.close()
	}
}

// Addr returns the server's client address through its proxy.
func (s *Server) Addr() string { return s.proxy.addr() }

// DirectAddr returns the server's own client address.
func (s *Server) DirectAddr() string { return fmt.Sprintf("127.0.0.1:%d", s.client) }

// Stall holds every byte between clients and the server (a partition)
// until Heal.
func (s *Server) Stall() { s.proxy.stall() }

// Heal ends a Stall.
func (s *Server) Heal() { s.proxy.heal() }

// Reset resets every client connection through the proxy (as a crash of
// the link or a firewall reject would); new connections are accepted.
func (s *Server) Reset() { s.proxy.resetConns() }

// Freeze stops the server's process (SIGSTOP) and returns once the kernel
// reports it stopped.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP, true)
}

// Thaw resumes a frozen server (SIGCONT) and returns once it serves again
// (in an ensemble: once it is back in a quorum).
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT, false)
	if err := s.waitServing(StartTimeout); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) signal(t testing.TB, sig syscall.Signal, stopped bool) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		t.Fatalf("zktest: server %d is not running", s.id)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("zktest: signal server %d: %v", s.id, err)
	}
	if err := proctest.WaitState(cmd.Process.Pid, stopped, 10*time.Second); err != nil {
		t.Fatalf("zktest: server %d: %v", s.id, err)
	}
}

// Kill kills the server's process (SIGKILL), waits for it to exit and
// resets the connections of its proxy, as the death of the process does.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
	s.proxy.resetConns()
}

// Restart starts a killed server again on its ports and data directory and
// returns once it serves (in an ensemble: once it has joined a quorum).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	if err := s.waitServing(StartTimeout); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) start() error {
	cmd := exec.Command("java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.logFile="+s.logFile,
		"-Dzookeeper.admin.enableServer=false",
		"-cp", Jar+":"+SLF4JBinding, mainClass, s.cfg)
	cmd.Dir = s.dir
	cmd.SysProcAttr = proctest.SysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("zktest: start server %d: %w", s.id, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// waitServing polls the server's srvr command until it reports a mode
// (standalone, leader or follower): no event announces it. It fails as
// soon as the server, or one of peers it needs, has exited.
func (s *Server) waitServing(timeout time.Duration, peers ...*Server) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := s.exited(); err != nil {
			return err
		}
		for _, p := range peers {
			if err := p.exited(); err != nil {
				return err
			}
		}
		mode, err := s.mode()
		if err == nil && mode != "" {
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("zktest: server %d not serving after %v (last: %v); log: %s", s.id, timeout, last, s.logTail())
}

// mode returns the server's mode from its srvr command, "" while it does
// not serve.
func (s *Server) mode() (string, error) {
	conn, err := net.DialTimeout("tcp", s.DirectAddr(), time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return m, nil
		}
	}
	return "", errors.Join(errors.New("no mode in srvr answer"), sc.Err())
}

// Mode returns the server's role ("standalone", "leader", "follower"), or
// "" while it does not serve.
func (s *Server) Mode() string {
	m, _ := s.mode()
	return m
}

// exited returns an error when the server's process has exited, wrapping
// errPortTaken when its log says a port was taken.
func (s *Server) exited() error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
	default:
		return nil
	}
	data, _ := os.ReadFile(s.logFile)
	if strings.Contains(string(data), "Address already in use") {
		return fmt.Errorf("%w: server %d exited while starting; log: %s", errPortTaken, s.id, s.logTail())
	}
	return fmt.Errorf("zktest: server %d exited while starting; log: %s", s.id, s.logTail())
}

func (s *Server) logTail() string {
	data, _ := os.ReadFile(s.logFile)
	const max = 4 << 10
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

// freePorts returns n distinct free loopback ports, below the kernel's
// ephemeral range (proctest.Ports) so that no connection takes a server's
// port while it restarts.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var res proctest.Ports
	defer res.Release()
	ports := make([]int, n)
	for i := range ports {
		p, err := res.Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	return ports
}
