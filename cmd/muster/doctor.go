package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// defaultCertWarn is how long before a certificate expires doctor warns.
const defaultCertWarn = 30 * 24 * time.Hour

// doctorOptions are the flags of muster doctor.
type doctorOptions struct {
	role, service string
	// xds are the control planes to ask (host:port), health the URLs of
	// their readiness endpoints.
	xds, health []string
	// xdsCACert verifies the control planes' certificates; xdsCert and
	// xdsKey are the client certificate presented to them.
	xdsCACert, xdsCert, xdsKey string
	certWarn                   time.Duration
	output                     string
}

func newDoctorCmd(g *globalOptions) *cobra.Command {
	o := doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a deployment: etcd, permissions, certificates, xDS replicas, the registry",
		Long: `Doctor checks, with the same etcd flags as every command, what a deployment
needs and prints one line per check (CHECK, TARGET, RESULT, DETAIL), then a
verdict. RESULT is ok, warn (works, but look at it) or fail. It exits 0
when no check failed and 1 when one did. It changes nothing in etcd.

  etcd        each endpoint answers; its version (3.4 to 3.7 are supported),
              leader and alarms
  auth        whether etcd authentication is on and how this client is
              known (password or client certificate); etcd 3.4 with a
              password is a warning (docs/SECURITY.md)
  permission  with --role, read and write access to each key or prefix that
              role needs (docs/SECURITY.md, "Checking a deployment"); writes
              are checked by a transaction whose condition is never true,
              so nothing is written
  lease       with --role register, a lease granted and revoked at once
  cert        --cacert, --cert, --xds-cacert, --xds-cert, and the
              certificates etcd and the xDS replicas serve: warn within
              --cert-warn of expiry, fail when expired or not yet valid
  xds         each --xds replica answers an ADS request for listeners and
              clusters within --timeout
  health      each --xds-health URL answers 200 (404: warn)
  registry    services, instances and the leases they are bound to`,
		Example: `  muster doctor --endpoints https://etcd-1:2379,https://etcd-2:2379 --cacert ca.pem --user gateway --password-file gw.pw --role xds --xds cp-1:18000 --xds cp-2:18000
  muster doctor --role register --service user --user user-svc --password-file user.pw`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(g); err != nil {
				return err
			}
			return runDoctor(cmd.Context(), g, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.role, "role", "", "check the etcd permissions of this role: register, xds, console, client or operator; empty: none")
	f.StringVar(&o.service, "service", "", "the service of --role register or client")
	f.StringSliceVar(&o.xds, "xds", nil, "xDS control plane (host:port) to ask over ADS; repeatable")
	f.StringSliceVar(&o.health, "xds-health", nil, "readiness URL of an xDS control plane (http://host:port/readyz); repeatable")
	f.StringVar(&o.xdsCACert, "xds-cacert", "", "CA (PEM) that verifies the --xds replicas' certificates; with it ADS is asked over TLS")
	f.StringVar(&o.xdsCert, "xds-cert", "", "client certificate (PEM) presented to the --xds replicas; needs --xds-key")
	f.StringVar(&o.xdsKey, "xds-key", "", "private key (PEM) of --xds-cert")
	f.DurationVar(&o.certWarn, "cert-warn", defaultCertWarn, "warn about a certificate that expires within this long")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *doctorOptions) validate(g *globalOptions) error {
	if err := validateOutput(o.output); err != nil {
		return err
	}
	if o.certWarn < 0 {
		return usageErrorf("--cert-warn: must not be negative, got %v", o.certWarn)
	}
	if (o.xdsCert == "") != (o.xdsKey == "") {
		return usageErrorf("--xds-cert and --xds-key go together: give both or neither")
	}
	if o.role == "" {
		if o.service != "" {
			return usageErrorf("--service needs --role register or client")
		}
		return nil
	}
	perService, ok := rolePerService(o.role)
	if !ok {
		return usageErrorf("--role: unknown role %q; want register, xds, console, client or operator", o.role)
	}
	if perService != (o.service != "") {
		if o.service == "" {
			return usageErrorf("--role %s needs --service", o.role)
		}
		return usageErrorf("--service: --role %s is not about one service", o.role)
	}
	if o.service != "" {
		if err := registry.ValidateName(o.service); err != nil {
			return usageErrorf("--service: %v", err)
		}
	}
	return nil
}

// Results of a check.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
)

// finding is one line of doctor's table.
type finding struct {
	Check  string `json:"check"`
	Target string `json:"target"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// findings are doctor's lines, in the order checked.
type findings []finding

func (fs *findings) add(check, target, result, format string, args ...any) {
	*fs = append(*fs, finding{Check: check, Target: target, Result: result, Detail: fmt.Sprintf(format, args...)})
}

// verdict is fail if a finding failed, else warn if one warned, else ok,
// with the counts.
func (fs findings) verdict() (string, string) {
	n := map[string]int{}
	for _, f := range fs {
		n[f.Result]++
	}
	v := checkOK
	switch {
	case n[checkFail] > 0:
		v = checkFail
	case n[checkWarn] > 0:
		v = checkWarn
	}
	return v, fmt.Sprintf("%s: %d ok, %d warn, %d fail", plural(len(fs), "check"), n[checkOK], n[checkWarn], n[checkFail])
}

func (fs findings) write(w io.Writer, format string) error {
	v, counts := fs.verdict()
	if format == outputJSON {
		return writeJSON(w, struct {
			Checks  findings `json:"checks"`
			Verdict string   `json:"verdict"`
		}{fs, v})
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "CHECK\tTARGET\tRESULT\tDETAIL")
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Check, f.Target, f.Result, f.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "verdict: %s (%s)\n", v, counts)
	return err
}

// runDoctor runs every check and writes the findings; it fails when a
// check failed.
func runDoctor(ctx context.Context, g *globalOptions, o doctorOptions, stdout io.Writer) error {
	var fs findings
	now := timeNow()
	for _, c := range []struct{ flag, file string }{
		{"--cacert", g.cacert}, {"--cert", g.cert}, {"--xds-cacert", o.xdsCACert}, {"--xds-cert", o.xdsCert},
	} {
		if c.file != "" {
			fs.checkCertFile(c.flag+" "+c.file, c.file, now, o.certWarn)
		}
	}
	fs.checkEtcd(ctx, g, o, now)
	for _, addr := range o.xds {
		fs.checkXDS(ctx, g.timeout, o, addr, now)
	}
	for _, u := range o.health {
		fs.checkHealth(ctx, g.timeout, u)
	}
	if err := fs.write(stdout, o.output); err != nil {
		return err
	}
	if v, counts := fs.verdict(); v == checkFail {
		return fmt.Errorf("doctor: %s", counts)
	}
	return nil
}

// checkCertFile checks the certificates of a PEM file: the one that
// expires first decides.
func (fs *findings) checkCertFile(target, file string, now time.Time, warn time.Duration) {
	data, err := os.ReadFile(file)
	if err != nil {
		fs.add("cert", target, checkFail, "%v", err)
		return
	}
	var first *x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			fs.add("cert", target, checkFail, "%v", err)
			return
		}
		if first == nil || c.NotAfter.Before(first.NotAfter) {
			first = c
		}
	}
	if first == nil {
		fs.add("cert", target, checkFail, "no PEM certificate in the file")
		return
	}
	fs.checkCert(target, first, now, warn)
}

// checkCert checks one certificate's validity period.
func (fs *findings) checkCert(target string, c *x509.Certificate, now time.Time, warn time.Duration) {
	subject := c.Subject.CommonName
	if subject == "" {
		subject = c.Subject.String()
	}
	left := c.NotAfter.Sub(now)
	switch {
	case now.After(c.NotAfter):
		fs.add("cert", target, checkFail, "%q expired on %s (%s ago)", subject, c.NotAfter.UTC().Format(time.DateOnly), span(-left))
	case now.Before(c.NotBefore):
		fs.add("cert", target, checkFail, "%q is not valid before %s", subject, c.NotBefore.UTC().Format(time.RFC3339))
	case left < warn:
		fs.add("cert", target, checkWarn, "%q expires on %s, in %s", subject, c.NotAfter.UTC().Format(time.DateOnly), span(left))
	default:
		fs.add("cert", target, checkOK, "%q valid until %s (%s)", subject, c.NotAfter.UTC().Format(time.DateOnly), span(left))
	}
}

// span renders a certificate's time left or past: whole days, or hours
// under two days.
func span(d time.Duration) string {
	if d < 48*time.Hour {
		return plural(int(d/time.Hour), "hour")
	}
	return plural(int(d/(24*time.Hour)), "day")
}

// checkEtcd checks each endpoint, the authentication, the role's
// permissions and the registry.
func (fs *findings) checkEtcd(ctx context.Context, g *globalOptions, o doctorOptions, now time.Time) {
	cfg, err := g.clientConfig()
	if err != nil {
		fs.add("etcd", strings.Join(g.endpoints, ","), checkFail, "%v", err)
		return
	}
	cfg.Logger = etcd.ClientLogger(nil)
	// The endpoints are asked by a client without credentials: Status
	// needs none, and a refused login must not hide which endpoints
	// answer.
	anonCfg := cfg
	anonCfg.Username, anonCfg.Password = "", ""
	anon, err := clientv3.New(anonCfg)
	if err != nil {
		fs.add("etcd", strings.Join(g.endpoints, ","), checkFail, "%v", err)
		return
	}
	defer anon.Close()
	var versions []string
	for _, ep := range g.endpoints {
		line := len(*fs)
		v := fs.checkEndpoint(ctx, anon, g.timeout, ep)
		if v != "" {
			versions = append(versions, v)
		}
		if cfg.TLS != nil && strings.HasPrefix(ep, "https://") {
			if why := fs.checkServedCert(ctx, g.timeout, cfg.TLS, ep, v == "", now, o.certWarn); why != nil && line < len(*fs) {
				(*fs)[line].Detail += "; connecting: " + why.Error()
			}
		}
	}
	if len(versions) == 0 {
		return
	}
	cli := anon
	if g.user != "" {
		if cli, err = clientv3.New(cfg); err != nil {
			fs.add("auth", "etcd", checkFail, "log in as %s: %v", g.user, err)
			return
		}
		defer cli.Close()
	}
	if !fs.checkAuth(ctx, cli, anon, g, versions) {
		return
	}
	if o.role != "" {
		fs.checkRole(ctx, cli, g, o)
	}
	fs.checkRegistry(ctx, cli, g, o)
}

// checkEndpoint asks one endpoint for its status and returns its version,
// or "" when it did not answer.
func (fs *findings) checkEndpoint(ctx context.Context, cli *clientv3.Client, timeout time.Duration, ep string) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		if isTimeout(err) {
			err = fmt.Errorf("no answer within %v", timeout)
		}
		fs.add("etcd", ep, checkFail, "%v", err)
		return ""
	}
	v := st.Version
	detail := "etcd " + v
	if st.Leader == st.Header.GetMemberId() {
		detail += ", leader"
	}
	detail += ", db " + strconv.FormatInt(st.DbSize, 10) + " bytes"
	switch {
	case len(st.Errors) > 0:
		fs.add("etcd", ep, checkFail, "%s; errors: %s", detail, strings.Join(st.Errors, "; "))
	case st.Leader == 0:
		fs.add("etcd", ep, checkFail, "%s; no leader", detail)
	case !versionAtLeast(v, 3, 4):
		fs.add("etcd", ep, checkFail, "%s: not supported (3.4 to 3.7 are)", detail)
	case versionAtLeast(v, 3, 8):
		fs.add("etcd", ep, checkWarn, "%s: newer than the versions tested (3.4 to 3.7)", detail)
	default:
		fs.add("etcd", ep, checkOK, "%s", detail)
	}
	return v
}

// versionAtLeast reports whether the etcd version v ("3.5.21") is at least
// major.minor; an unreadable version is not.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// checkServedCert checks the certificate an https:// endpoint serves.
// When the endpoint did not answer (unanswered), it returns why a
// connection fails, if it does: etcd refusing the client certificate is
// told only after the handshake (TLS 1.3), so the connection is read
// briefly for its alert.
func (fs *findings) checkServedCert(ctx context.Context, timeout time.Duration, cfg *tls.Config, ep string, unanswered bool, now time.Time, warn time.Duration) error {
	u, err := url.Parse(ep)
	if err != nil {
		return nil
	}
	return fs.checkServedCertAt(ctx, timeout, cfg, ep, u.Host, unanswered, now, warn)
}

// checkServedCertAt is checkServedCert for the TLS server at addr
// (host:port), named ep in the findings.
func (fs *findings) checkServedCertAt(ctx context.Context, timeout time.Duration, cfg *tls.Config, ep, addr string, unanswered bool, now time.Time, warn time.Duration) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := tls.Dialer{Config: cfg.Clone()}
	d.Config.ServerName = host
	d.Config.NextProtos = []string{"h2"}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if unanswered {
			return err
		}
		return nil
	}
	conn := c.(*tls.Conn)
	defer conn.Close()
	if certs := conn.ConnectionState().PeerCertificates; len(certs) > 0 {
		fs.checkCert("served by "+ep, certs[0], now, warn)
	}
	if !unanswered {
		return nil
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var b [1]byte
	var ne net.Error
	if _, err := conn.Read(b[:]); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return err
	}
	return nil
}

// checkAuth says whether etcd authentication is on and as whom this
// client is known, and whether the identity can work at all.
func (fs *findings) checkAuth(ctx context.Context, cli, anon *clientv3.Client, g *globalOptions, versions []string) bool {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	const target = "etcd"
	enabled, err := authEnabled(ctx, cli, anon, g)
	if errors.Is(err, rpctypes.ErrUserNotFound) && g.user == "" {
		fs.add("auth", target, checkFail, "on, and etcd has no user named as the client certificate's common name (--cert): it refuses this client's requests")
		return false
	}
	if err != nil {
		fs.add("auth", target, checkFail, "cannot tell whether authentication is on: %v", err)
		return false
	}
	old := false
	for _, v := range versions {
		old = old || !versionAtLeast(v, 3, 5)
	}
	switch {
	case !enabled:
		fs.add("auth", target, checkWarn, "authentication is off: whoever reaches etcd may write every key (docs/SECURITY.md)")
	case g.user != "" && old:
		fs.add("auth", target, checkWarn, "password of user %s on etcd 3.4: a client not built from etcd.ClientConfig (every muster command and library type uses it) stays failed after a member restart or token expiry (docs/SECURITY.md, \"Supported etcd versions\")", g.user)
	case g.user != "":
		fs.add("auth", target, checkOK, "on; password of user %s", g.user)
	case g.cert != "":
		fs.add("auth", target, checkOK, "on; client certificate (etcd's user is its common name)")
	default:
		fs.add("auth", target, checkFail, "on, and neither --user nor --cert gives this client an identity: etcd refuses its requests")
		return false
	}
	return true
}

// authEnabled asks etcd whether authentication is on: AuthStatus as this
// client (etcd 3.5 and later), else a login without credentials, which
// etcd 3.4 refuses with "authentication is not enabled" when it is off.
func authEnabled(ctx context.Context, cli, anon *clientv3.Client, g *globalOptions) (bool, error) {
	st, err := cli.AuthStatus(ctx)
	switch {
	case err == nil:
		return st.Enabled, nil
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		// etcd 3.5 and 3.6 answer AuthStatus to root only, when
		// authentication is on.
		return true, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return false, err
	}
	_, err = anon.Authenticate(ctx, g.user, g.password)
	switch {
	case err == nil, errors.Is(err, rpctypes.ErrAuthFailed):
		return true, nil
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return false, nil
	}
	return false, err
}

// checkRegistry counts the services, instances and leases the user may
// read: the whole registry, or the service of --service.
func (fs *findings) checkRegistry(ctx context.Context, cli *clientv3.Client, g *globalOptions, o doctorOptions) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	from := strings.TrimRight(g.prefix, "/") + "/"
	if o.service != "" {
		from = registry.ServicePrefix(g.prefix, o.service)
	}
	// Values included: a keys-only range leaves the leases out.
	resp, err := cli.Get(ctx, from, clientv3.WithPrefix())
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		fs.add("registry", from, checkWarn, "not readable as this user: not counted")
		return
	case err != nil:
		fs.add("registry", from, checkFail, "%v", err)
		return
	}
	services, instances, leases := map[string]bool{}, 0, map[int64]bool{}
	for _, kv := range resp.Kvs {
		svc, _, err := registry.ParseKey(g.prefix, string(kv.Key))
		if err != nil {
			continue // an override, or a key of someone else
		}
		services[svc] = true
		instances++
		if kv.Lease != 0 {
			leases[kv.Lease] = true
		}
	}
	detail := fmt.Sprintf("%s, %s, %s", plural(len(services), "service"), plural(instances, "instance"), plural(len(leases), "lease"))
	if all, err := cli.Leases(ctx); err == nil {
		detail += fmt.Sprintf(" (etcd holds %d in all)", len(all.Leases))
	}
	fs.add("registry", from, checkOK, "%s", detail)
}

// checkXDS asks a control plane over ADS for its listeners and clusters.
func (fs *findings) checkXDS(ctx context.Context, timeout time.Duration, o doctorOptions, addr string, now time.Time) {
	cfg, err := o.xdsTLS()
	if err != nil {
		fs.add("xds", addr, checkFail, "%v", err)
		return
	}
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fs.add("xds", addr, checkFail, "%v", err)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		fs.add("xds", addr, checkFail, "%v", xdsError(err, timeout))
		return
	}
	node := &corev3.Node{Id: "muster-doctor", UserAgentName: "muster-doctor"}
	counts := map[string]int{}
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType} {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
			fs.add("xds", addr, checkFail, "%v", xdsError(err, timeout))
			return
		}
		resp, err := stream.Recv()
		if err != nil {
			fs.add("xds", addr, checkFail, "%v", xdsError(err, timeout))
			return
		}
		counts[typ] = len(resp.GetResources())
		node = nil // sent once per stream
	}
	fs.add("xds", addr, checkOK, "ADS answered in %v: %s, %s", time.Since(start).Round(time.Millisecond),
		plural(counts[resourcev3.ListenerType], "listener"), plural(counts[resourcev3.ClusterType], "cluster"))
	if cfg != nil {
		fs.checkServedCertAt(ctx, timeout, cfg, addr, addr, false, now, o.certWarn)
	}
}

// xdsError says a deadline is one.
func xdsError(err error, timeout time.Duration) error {
	if isTimeout(err) {
		return fmt.Errorf("no answer within %v", timeout)
	}
	return err
}

// xdsTLS is the TLS configuration of the ADS connections, made as the
// etcd client's is: nil (plaintext) unless --xds-cacert or --xds-cert is
// given.
func (o doctorOptions) xdsTLS() (*tls.Config, error) {
	g := globalOptions{cacert: o.xdsCACert, cert: o.xdsCert, key: o.xdsKey}
	cfg, err := g.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("--xds-cacert, --xds-cert: %w", err)
	}
	return cfg, nil
}

// checkHealth asks a readiness URL.
func (fs *findings) checkHealth(ctx context.Context, timeout time.Duration, u string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		fs.add("health", u, checkFail, "%v", err)
		return
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fs.add("health", u, checkFail, "%v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	switch resp.StatusCode {
	case http.StatusOK:
		fs.add("health", u, checkOK, "%s %s", resp.Status, line)
	case http.StatusNotFound:
		fs.add("health", u, checkWarn, "%s: no readiness endpoint there (a muster before /readyz?)", resp.Status)
	default:
		fs.add("health", u, checkFail, "%s %s", resp.Status, line)
	}
}

// need is a key, or a prefix of keys, that a role reads, and whether it
// writes there too.
type need struct {
	key           string
	prefix, write bool
}

func (n need) target() string {
	if n.prefix {
		return "prefix " + n.key
	}
	return "key " + n.key
}

// rolePerService reports whether role is about one service (--service),
// and whether it is a role at all.
func rolePerService(role string) (perService, ok bool) {
	switch role {
	case "register", "client":
		return true, true
	case "xds", "console", "operator":
		return false, true
	}
	return false, false
}

// roleNeeds returns what role needs of etcd, under prefix, for service
// (of register and client): the keys and prefixes it reads or writes, and
// whether it grants leases. It is docs/SECURITY.md's "Per-service
// isolation" table, which "Checking a deployment" there lists (a test
// compares the two).
func roleNeeds(role, prefix, service string) (needs []need, lease bool) {
	services := strings.TrimRight(prefix, "/") + "/"
	canaries, policies := registry.CanaryKey(prefix, ""), registry.PolicyKey(prefix, "")
	journal := registry.JournalRoot(prefix)
	switch role {
	case "register":
		return []need{{key: registry.ServicePrefix(prefix, service), prefix: true, write: true}}, true
	case "client":
		return []need{
			{key: registry.ServicePrefix(prefix, service), prefix: true},
			{key: registry.CanaryKey(prefix, service)},
			{key: registry.PolicyKey(prefix, service)},
		}, false
	case "xds":
		return []need{{key: services, prefix: true}, {key: canaries, prefix: true}, {key: policies, prefix: true}}, false
	case "console":
		return []need{{key: services, prefix: true}, {key: canaries, prefix: true}, {key: policies, prefix: true}, {key: journal, prefix: true}}, false
	case "operator":
		return []need{
			{key: services, prefix: true, write: true},
			{key: canaries, prefix: true, write: true},
			{key: policies, prefix: true, write: true},
			{key: journal, prefix: true, write: true},
		}, false
	}
	return nil, false
}

// probeName is the last element of the key a write is checked on under a
// prefix. Nothing is written there.
const probeName = "muster-doctor-probe"

// checkRole checks the permissions --role needs, without changing
// anything: a read is a Get of one key's name; a write is a transaction
// whose condition (a key's version below 0) is never true, with the Put in
// the branch it never takes: etcd checks the permissions of both branches
// before it evaluates the condition. A lease is granted and revoked at
// once.
func (fs *findings) checkRole(ctx context.Context, cli *clientv3.Client, g *globalOptions, o doctorOptions) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	needs, lease := roleNeeds(o.role, g.prefix, o.service)
	for _, n := range needs {
		read := []clientv3.OpOption{clientv3.WithLimit(1), clientv3.WithKeysOnly()}
		probe := n.key
		if n.prefix {
			read = append(read, clientv3.WithPrefix())
			probe += probeName
		}
		if _, err := cli.Get(ctx, n.key, read...); err != nil {
			fs.add("permission", n.target(), checkFail, "read: %v", err)
			continue
		}
		if !n.write {
			fs.add("permission", n.target(), checkOK, "read")
			continue
		}
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(probe), "<", 0)).Then(clientv3.OpPut(probe, "")).Commit()
		switch {
		case err != nil:
			fs.add("permission", n.target(), checkFail, "write: %v", err)
		case resp.Succeeded:
			fs.add("permission", n.target(), checkFail, "write: the never-true condition held and %s was written", probe)
		default:
			fs.add("permission", n.target(), checkOK, "read, write")
		}
	}
	if lease {
		fs.checkLease(ctx, cli)
	}
}

// checkLease grants a lease and revokes it at once.
func (fs *findings) checkLease(ctx context.Context, cli *clientv3.Client) {
	l, err := cli.Grant(ctx, 5)
	if err != nil {
		fs.add("lease", "grant", checkFail, "%v", err)
		return
	}
	if _, err := cli.Revoke(ctx, l.ID); err != nil {
		fs.add("lease", "grant", checkWarn, "granted lease %x, but could not revoke it (it expires in 5s): %v", l.ID, err)
		return
	}
	fs.add("lease", "grant", checkOK, "granted and revoked lease %x", l.ID)
}
