package etcdtest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BinariesEnv names the environment variable that lists the etcd server
// binaries tests run besides the embedded etcd (WithBinary), separated by
// colons. .ci/run sets it to Debian's etcd 3.4 and etcd 3.5 and 3.6 built
// from the Go module proxy (scripts/etcd-binaries).
const BinariesEnv = "MUSTER_ETCD_BINARIES"

// Binaries returns the paths listed in BinariesEnv, in order.
func Binaries() []string {
	var out []string
	for _, p := range filepath.SplitList(os.Getenv(BinariesEnv)) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// WithBinary runs each member as the etcd server binary at path, in a
// child process, instead of the etcd this module embeds: the way to test
// against the etcd versions people deploy (Debian's 3.4, 3.5, 3.6). It
// implies WithProcesses, and works with WithSize, WithTLS, WithAuth and
// WithJWT. Start fails the test if the binary does not run or is older
// than etcd 3.4.
//
// The members run with the same timing as embedded ones (10 ms ticks,
// 100 ms elections) and, from etcd 3.5, without fsync. They log errors to
// their stderr, kept for a failed start, or everything to a file under
// LogDirEnv.
func WithBinary(path string) Option {
	return func(o *options) {
		o.binary = path
		o.processes = true
	}
}

// WithJWT makes the tokens of WithAuth JSON Web Tokens signed with an RSA
// key made for the cluster (RS256), which every member accepts and a
// restart keeps, and which expire tokenTTL after the login that made them
// (at least a second; etcd's default is five minutes), not after their last
// use as simple tokens do. Start fails the test without WithAuth.
func WithJWT() Option {
	return func(o *options) { o.jwt = true }
}

// versionLine finds the version in the output of etcd --version.
var versionLine = regexp.MustCompile(`etcd Version: (\d+)\.(\d+)\.(\d+)`)

// BinaryVersion runs the etcd binary at path with --version and returns
// its version, such as "3.4.23".
func BinaryVersion(path string) (string, error) {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", path, err, out)
	}
	m := versionLine.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("%s --version printed no etcd version: %s", path, out)
	}
	return m[1] + "." + m[2] + "." + m[3], nil
}

// checkBinary checks that path is an etcd server of version 3.4 or later
// and tells whether it takes --unsafe-no-fsync (3.5 and later).
func checkBinary(path string) (noFsync bool, err error) {
	v, err := BinaryVersion(path)
	if err != nil {
		return false, err
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil || major != 3 || minor < 4 {
		return false, fmt.Errorf("%s is etcd %s; need 3.4 or later", path, v)
	}
	return minor >= 5, nil
}

// flags returns the command line of an etcd binary serving mc's member.
func (mc memberConfig) flags() []string {
	f := []string{
		"--name", mc.Name,
		"--data-dir", mc.Dir,
		"--listen-client-urls", mc.ClientURL,
		"--advertise-client-urls", mc.AdvertiseClientURL,
		"--listen-peer-urls", mc.PeerURL,
		"--initial-advertise-peer-urls", mc.AdvertisePeerURL,
		"--initial-cluster", mc.InitialCluster,
		"--initial-cluster-token", mc.Token,
		"--initial-cluster-state", mc.State,
		"--heartbeat-interval", strconv.Itoa(tickMs),
		"--election-timeout", strconv.Itoa(electionMs),
		"--logger", "zap",
		"--log-level", "error",
	}
	if mc.BinaryNoFsync {
		f = append(f, "--unsafe-no-fsync")
	}
	if mc.CertFile != "" {
		f = append(f, "--cert-file", mc.CertFile, "--key-file", mc.KeyFile,
			"--trusted-ca-file", mc.TrustedCAFile, "--client-cert-auth")
	}
	if mc.MaxTxnOps > 0 {
		f = append(f, "--max-txn-ops", strconv.Itoa(mc.MaxTxnOps))
	}
	if mc.MaxRequestBytes > 0 {
		f = append(f, "--max-request-bytes", strconv.Itoa(mc.MaxRequestBytes))
	}
	if mc.CheapPasswords {
		f = append(f, "--bcrypt-cost", strconv.Itoa(bcryptCost))
	}
	if mc.Auth {
		f = append(f, "--auth-token", mc.AuthToken)
		if mc.TokenTTL > 0 {
			f = append(f, "--auth-token-ttl", strconv.FormatUint(uint64(mc.TokenTTL), 10))
		}
	}
	return f
}

// waitBinaryReady waits until the etcd binary that ch runs answers a
// status request on its own client URL, and returns its member ID.
func (m *Member) waitBinaryReady(ch *child, deadline time.Time) (uint64, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		id, err := m.status(minTime(deadline, time.Now().Add(time.Second)))
		if err == nil {
			return id, nil
		}
		select {
		case <-ch.exited:
			return 0, fmt.Errorf("etcd exited before it was ready (%v): %s", ch.err, ch.stderr)
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("etcd not ready within %v (is a quorum of members running?): %v; %s", startTimeout, err, ch.stderr)
		}
		<-tick.C
	}
}

// status asks the member for its ID through a client of its own, which
// logs in first with auth (etcd 3.6 answers Status only to a user, and a
// login needs a quorum).
func (m *Member) status(deadline time.Time) (uint64, error) {
	cfg := m.directConfig()
	cfg.DialTimeout = time.Until(deadline)
	cli, err := clientv3.New(cfg)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := cli.Status(ctx, m.DirectEndpoint())
	if err != nil {
		return 0, err
	}
	return resp.Header.MemberId, nil
}

// jwtAuthToken makes an RSA key pair in a new temporary directory of t and
// returns etcd's --auth-token setting for JWTs signed with it that expire
// ttl after login (a second at least; 5 minutes if ttl is not positive).
func jwtAuthToken(t testing.TB, ttl time.Duration) string {
	t.Helper()
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("etcdtest: WithJWT: generate key: %v", err)
	}
	priv, pub := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatalf("etcdtest: WithJWT: %v", err)
	}
	if err := writePEM(priv, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		t.Fatalf("etcdtest: WithJWT: %v", err)
	}
	if err := writePEM(pub, "PUBLIC KEY", pubDER); err != nil {
		t.Fatalf("etcdtest: WithJWT: %v", err)
	}
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	ttl = max(ttl, time.Second)
	return fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=RS256,ttl=%s", pub, priv, ttl)
}
