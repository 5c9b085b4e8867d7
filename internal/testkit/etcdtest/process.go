package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/proctest"
)

const (
	// childEnv carries a process member's configuration (JSON) to the
	// child; RunMemberIfChild looks for it.
	childEnv = "MUSTER_ETCDTEST_MEMBER"
	// readyLine starts the line a child prints on stdout once its member
	// is ready, followed by the member ID in hex.
	readyLine = "etcdtest-member-ready"
	// stderrTail is how much of a child's stderr is kept for error
	// messages.
	stderrTail = 8 << 10
)

// LogDirEnv names the environment variable that, when it holds a
// directory, makes every process member write its full etcd log (info
// level) to NAME.log in that directory instead of errors only to stderr:
// the way to see what the servers did in a failing test.
//
//	MUSTER_ETCDTEST_LOGDIR=/tmp/logs go test -run TestX ./pkg/
const LogDirEnv = "MUSTER_ETCDTEST_LOGDIR"

// WithProcesses runs each member in a child process instead of inside the
// test process, so that a test can freeze (Member.Freeze, SIGSTOP), thaw
// (Member.Thaw) and kill (Member.Kill, SIGKILL) a real etcd process. The
// default is in-process members, which start faster.
//
// The child is the test binary itself: every TestMain of a package that
// uses WithProcesses must call RunMemberIfChild first. Members behave as
// in-process ones otherwise (same settings, ports, proxies and faults),
// except that Member.Etcd and Cluster.RPCStats are not available (they
// panic), and WithLogger does not reach the children (they log errors to
// their stderr, which appears in the error of a failed start).
func WithProcesses() Option {
	return func(o *options) { o.processes = true }
}

// RunMemberIfChild runs an etcd member and exits if the process is a child
// started for a process member (WithProcesses); otherwise it returns at
// once. Call it first in TestMain, before goleak and flag parsing:
//
//	func TestMain(m *testing.M) {
//		etcdtest.RunMemberIfChild()
//		goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
//	}
//
// The child serves until SIGTERM (graceful: a leader hands over leadership
// first), until its stdin closes (the parent died or gave up on it) or
// until SIGKILL; on Linux it also gets SIGKILL when the parent dies, so a
// crashed test leaves no orphans.
func RunMemberIfChild() {
	cfg, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	if err := runChild(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "etcdtest child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runChild runs the member configured by js (a memberConfig) until it is
// told to stop.
func runChild(js string) error {
	var mc memberConfig
	if err := json.Unmarshal([]byte(js), &mc); err != nil {
		return fmt.Errorf("parse %s: %w", childEnv, err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()

	abortCtx, abort := context.WithCancel(context.Background())
	defer abort()
	cfg := mc.embedConfig()
	cfg.LogOutputs = []string{"stderr"}
	if dir := os.Getenv(LogDirEnv); dir != "" {
		// Debugging a test: the member's full log, info level, in a file.
		cfg.LogOutputs = []string{filepath.Join(dir, mc.Name+".log")}
		cfg.LogLevel = "info"
	}
	cfg.GRPCAdditionalServerOptions = embedetcd.AbortOptions(abortCtx)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("failed before it was ready: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("stopped before it was ready")
	case <-term:
		return nil
	case <-stdinClosed:
		return nil
	}
	fmt.Printf("%s %x\n", readyLine, uint64(e.Server.MemberID()))
	select {
	case <-term:
		// As a process does on SIGTERM: hand over leadership, stop, exit.
		// The exit closes every connection, so there is no need to wait
		// for peers in e.Close.
		abort()
		e.Server.Stop()
		return nil
	case <-stdinClosed:
		return nil
	case err := <-e.Err():
		return err
	case <-e.Server.StopNotify():
		return errors.New("server stopped")
	}
}

// memberConfig is what a member's server is started with, in-process or
// in a child process (as JSON).
type memberConfig struct {
	Name, Dir                        string
	ClientURL, AdvertiseClientURL    string
	PeerURL, AdvertisePeerURL        string
	InitialCluster, Token, State     string
	CertFile, KeyFile, TrustedCAFile string // client TLS; empty for plain
	Auth                             bool
	AuthToken                        string // etcd's --auth-token with Auth
	TokenTTL                         uint
	CheapPasswords                   bool   // hash passwords at bcryptCost
	Binary                           string // the etcd binary to run; empty for the test binary
	BinaryNoFsync                    bool   // Binary takes --unsafe-no-fsync
	MaxTxnOps                        int    // 0: etcd's default
	MaxRequestBytes                  int    // 0: etcd's default
}

// memberConfig returns the configuration of m's server; state is the
// initial cluster state, "new" or "existing" (which does not matter once
// the data directory is initialised).
func (m *Member) memberConfig(state string) memberConfig {
	mc := memberConfig{
		Name:               m.name,
		Dir:                m.dir,
		ClientURL:          m.clientURL.String(),
		AdvertiseClientURL: m.proxyURL.String(),
		PeerURL:            m.peerURL.String(),
		AdvertisePeerURL:   m.peerFwdURL.String(),
		InitialCluster:     m.initialCluster,
		Token:              m.token,
		State:              state,
		Auth:               m.auth,
		AuthToken:          m.authToken,
		TokenTTL:           m.tokenTTL,
		CheapPasswords:     m.cheapPasswords,
		Binary:             m.binary,
		BinaryNoFsync:      m.noFsync,
		MaxTxnOps:          m.maxTxnOps,
		MaxRequestBytes:    m.maxReqSize,
	}
	if m.tls != nil {
		mc.CertFile, mc.KeyFile, mc.TrustedCAFile = m.tls.ServerCertFile, m.tls.ServerKeyFile, m.tls.CAFile
	}
	return mc
}

// embedConfig returns the embed configuration for mc, logging errors only;
// the caller sets the logger's output and the gRPC server options.
func (mc memberConfig) embedConfig() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = mc.Name
	cfg.Dir = mc.Dir
	cfg.ListenClientUrls = []url.URL{mustURL(mc.ClientURL)}
	cfg.AdvertiseClientUrls = []url.URL{mustURL(mc.AdvertiseClientURL)}
	cfg.ListenPeerUrls = []url.URL{mustURL(mc.PeerURL)}
	cfg.AdvertisePeerUrls = []url.URL{mustURL(mc.AdvertisePeerURL)}
	cfg.InitialCluster = mc.InitialCluster
	cfg.InitialClusterToken = mc.Token
	cfg.ClusterState = mc.State
	cfg.TickMs = tickMs
	cfg.ElectionMs = electionMs
	// Writes reach the page cache, which survives the death of the
	// process (SIGKILL), not that of the machine: enough for tests.
	cfg.UnsafeNoFsync = true
	cfg.EnableGRPCGateway = false
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	if mc.CertFile != "" {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       mc.CertFile,
			KeyFile:        mc.KeyFile,
			TrustedCAFile:  mc.TrustedCAFile,
			ClientCertAuth: true,
		}
	}
	if mc.MaxTxnOps > 0 {
		cfg.MaxTxnOps = uint(mc.MaxTxnOps)
	}
	if mc.MaxRequestBytes > 0 {
		cfg.MaxRequestBytes = uint(mc.MaxRequestBytes)
	}
	if mc.CheapPasswords {
		cfg.BcryptCost = bcryptCost
	}
	if mc.Auth {
		cfg.AuthToken = mc.AuthToken
		if mc.TokenTTL > 0 {
			cfg.AuthTokenTTL = mc.TokenTTL
		}
	}
	return cfg
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(fmt.Sprintf("etcdtest: bad URL %q: %v", s, err))
	}
	return *u
}

// child is a member's server running in a child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr *tailBuffer
	ready  chan uint64   // receives the member ID once the member is ready
	exited chan struct{} // closed once the process has exited and been reaped
	err    error         // the result of Wait; read after exited
	frozen bool          // SIGSTOPped; guarded by Member.mu
}

// startChild starts a child process running mc's member; it does not
// wait for it to be ready.
func startChild(mc memberConfig) (*child, error) {
	var cmd *exec.Cmd
	if mc.Binary != "" {
		cmd = exec.Command(mc.Binary, mc.flags()...)
		if dir := os.Getenv(LogDirEnv); dir != "" {
			cmd.Args = append(cmd.Args, "--log-level", "info", "--log-outputs", filepath.Join(dir, mc.Name+".log"))
		}
	} else {
		js, err := json.Marshal(mc)
		if err != nil {
			return nil, err
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the test binary: %w", err)
		}
		// -test.run matches nothing, so that a TestMain that forgot to call
		// RunMemberIfChild runs no test and exits (and Start says why).
		cmd = exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	}
	cmd.SysProcAttr = proctest.SysProcAttr()
	ch := &child{cmd: cmd, stderr: &tailBuffer{max: stderrTail}, ready: make(chan uint64, 1), exited: make(chan struct{})}
	cmd.Stdout = &readyWriter{ready: ch.ready}
	cmd.Stderr = ch.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	ch.stdin = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child process: %w", err)
	}
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
	}()
	return ch, nil
}

// waitReady waits until the child's member is ready and returns its ID.
func (ch *child) waitReady(deadline time.Time) (uint64, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case id := <-ch.ready:
		return id, nil
	case <-ch.exited:
		return 0, fmt.Errorf("child process exited before its member was ready (%v; does TestMain call etcdtest.RunMemberIfChild first?): %s",
			ch.err, ch.stderr)
	case <-timer.C:
		return 0, fmt.Errorf("child's member not ready within %v (is a quorum of members running?): %s", startTimeout, ch.stderr)
	}
}

// signal sends sig to the child unless it has exited.
func (ch *child) signal(sig syscall.Signal) {
	select {
	case <-ch.exited:
	default:
		_ = ch.cmd.Process.Signal(sig)
	}
}

// kill kills the child (SIGKILL) and waits until it is reaped.
func (ch *child) kill() {
	ch.signal(syscall.SIGKILL)
	<-ch.exited
}

// terminate asks the child to stop (SIGTERM, and SIGCONT in case it is
// frozen) and waits up to timeout for it to exit, then kills it. It
// reports an error if the child had to be killed.
func (ch *child) terminate(timeout time.Duration) error {
	ch.signal(syscall.SIGTERM)
	ch.signal(syscall.SIGCONT)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ch.exited:
		return nil
	case <-timer.C:
		ch.kill()
		return fmt.Errorf("child process did not exit within %v of SIGTERM and was killed: %s", timeout, ch.stderr)
	}
}

// readyWriter is a child's stdout: it looks for the ready line.
type readyWriter struct {
	ready chan<- uint64
	buf   []byte
	done  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if rest, ok := strings.CutPrefix(line, readyLine+" "); ok {
			if id, err := strconv.ParseUint(rest, 16, 64); err == nil {
				w.ready <- id
				w.done, w.buf = true, nil
				return len(p), nil
			}
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.b) == 0 {
		return "(no output on stderr)"
	}
	return "stderr:\n" + string(t.b)
}
