package fleet_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/proctest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
)

// roleEnv carries a child's role and configuration (a roleConfig, JSON).
const roleEnv = "MUSTER_FLEET_ROLE"

// roleConfig is what a child process is started with.
type roleConfig struct {
	Role    string     // "registrars", "clients" or "xds"
	Regions [][]string // each region's etcd cluster: its endpoints

	// registrars: processes [First, First+Count), each with Instances
	// instances in Spread of Services services, on leases of TTL.
	First, Count, Instances, Services, Spread int
	TTL                                       time.Duration
	Naming                                    bool // also write etcd naming's copy

	// clients: channels on Followed (channel j follows Followed[j%len]),
	// Expect[s] instances each at the start (ExpectFirst[s] in the first
	// region, all etcd:/// channels follow).
	Followed                 []string
	Channels, NamingChannels int
	Expect, ExpectFirst      map[string]int
}

// runRoleIfChild runs the child's role and exits, if the process is a
// child started by startRole; otherwise it returns at once. The role runs
// until its stdin closes (the benchmark is done or died).
func runRoleIfChild() {
	js, ok := os.LookupEnv(roleEnv)
	if !ok {
		return
	}
	var cfg roleConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fleet child: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	out := &lineWriter{w: bufio.NewWriter(os.Stdout)}
	var err error
	switch cfg.Role {
	case "registrars":
		err = runRegistrars(ctx, cfg, out)
	case "clients":
		err = runClients(ctx, cfg, out)
	case "xds":
		err = runXDS(ctx, cfg, out)
	default:
		err = fmt.Errorf("unknown role %q", cfg.Role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "fleet child %s: %v\n", cfg.Role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// lineWriter writes whole lines to the parent, from any goroutine.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// printf writes one line (format has no newline) and flushes.
func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
	_ = l.w.Flush()
}

// lines writes several lines at once and flushes.
func (l *lineWriter) lines(ls []string) {
	if len(ls) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range ls {
		_, _ = l.w.WriteString(s)
		_ = l.w.WriteByte('\n')
	}
	_ = l.w.Flush()
}

// child is a running child process of the benchmark.
type child struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	done   chan struct{} // closed when stdout ends
	stderr syncbuf.Buffer
}

// startRole starts the test binary as a child running cfg's role; each line
// it prints goes to onLine (from one goroutine). The child is ended at b's
// end (stdin closed, then killed if it lingers).
func startRole(b *testing.B, cfg roleConfig, onLine func(string)) *child {
	js, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ch := &child{cmd: exec.Command(exe, "-test.run=^$"), done: make(chan struct{})}
	ch.cmd.Env = append(os.Environ(), roleEnv+"="+string(js))
	ch.cmd.SysProcAttr = proctest.SysProcAttr()
	ch.cmd.Stderr = &ch.stderr
	stdout, err := ch.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	if err := ch.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(ch.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			onLine(sc.Text())
		}
	}()
	b.Cleanup(func() {
		_ = ch.stdin.Close()
		select {
		case <-ch.done:
		case <-time.After(10 * time.Second):
			_ = ch.cmd.Process.Kill()
			<-ch.done
		}
		_ = ch.cmd.Wait()
	})
	return ch
}

// pid is the child's process ID.
func (c *child) pid() int { return c.cmd.Process.Pid }

// failed returns why the child ended early, or "" while it runs.
func (c *child) failed() string {
	select {
	case <-c.done:
		return fmt.Sprintf("child %d ended: %s", c.pid(), c.stderr.String())
	default:
		return ""
	}
}
