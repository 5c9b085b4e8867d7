package deploy

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of kubernetes/*.yaml, decoded into their
// types (a field their type does not have is an error).
type manifests struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap // by name
}

// decodeManifests reads every file of kubernetes/.
func decodeManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("kubernetes/*.yaml: %v %v", files, err)
	}
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}}
	var cms []*corev1.ConfigMap
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(text), "\n---\n") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s, document %d: %v", file, i+1, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				m.deployments, obj = append(m.deployments, d), d
			case "v1 Service":
				s := &corev1.Service{}
				m.services, obj = append(m.services, s), s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				cms, obj = append(cms, c), c
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "policy/v1 PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			default:
				t.Fatalf("%s, document %d: %s %s: a kind the test does not know", file, i+1, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", file, i+1, meta.Kind, err)
			}
		}
	}
	for _, c := range cms {
		m.configMaps[c.Name] = c
	}
	return m
}

// A muster container's first argument is the muster command it runs.
var musterImage = regexp.MustCompile(`/muster:[^/]+$`)

// listenFlag is the flag whose listener serves a muster command's health
// endpoints (the probes' port).
var listenFlag = map[string]string{
	"xds":      "metrics-listen",
	"register": "metrics-listen",
	"serve":    "metrics-listen",
	"console":  "listen",
}

// The manifests decode into Kubernetes' types; each Service selects a
// Deployment's pods and targets ports they name; each muster container
// runs a command line the muster command accepts, and its probes point at
// /livez and /readyz on a port it names, the port of the listener that
// serves them. Then each Deployment's pod runs: its muster containers as
// processes with the manifests' arguments and environment (etcd replaced
// by a test registry; the pod's other containers stood in for by a gRPC
// server whose health service says SERVING on each of their ports), and
// each probe is sent as the kubelet sends it, until it answers 200.
func TestKubernetesManifests(t *testing.T) {
	m := decodeManifests(t)
	if len(m.deployments) == 0 {
		t.Fatal("no Deployment in kubernetes/")
	}
	for _, s := range m.services {
		checkService(t, s, m.deployments)
	}
	endpoint := registry(t)
	for _, d := range m.deployments {
		t.Run(d.Name, func(t *testing.T) {
			if !labelsMatch(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				t.Errorf("its selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
			}
			for _, c := range musterContainers(d) {
				checkContainer(t, d, c, m.configMaps)
			}
			if t.Failed() {
				return
			}
			runPod(t, d, m.configMaps, endpoint)
		})
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// musterContainers are the containers of d that run the muster image.
func musterContainers(d *appsv1.Deployment) []*corev1.Container {
	var cs []*corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; musterImage.MatchString(c.Image) {
			cs = append(cs, c)
		}
	}
	return cs
}

// checkService checks that s selects the pods of a Deployment and that
// each of its ports targets a port those pods name.
func checkService(t *testing.T, s *corev1.Service, ds []*appsv1.Deployment) {
	t.Helper()
	for _, d := range ds {
		if d.Namespace != s.Namespace || !labelsMatch(s.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if _, ok := podPort(d.Spec.Template.Spec.Containers, p.TargetPort); !ok {
				t.Errorf("Service %s: port %s targets %s, which no container of Deployment %s has", s.Name, p.Name, p.TargetPort.String(), d.Name)
			}
		}
		return
	}
	t.Errorf("Service %s: its selector %v selects no Deployment's pods", s.Name, s.Spec.Selector)
}

// podPort finds the container port p names (by name or number) among cs.
func podPort(cs []corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, c := range cs {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// exampleEnv is what the test gives the variables a pod's containers
// take from the pod itself (the downward API), when it checks their
// arguments.
var exampleEnv = map[string]string{"status.podIP": "10.244.1.7", "metadata.name": "pod-0", "metadata.namespace": "muster"}

// checkContainer checks c's arguments against the muster command and its
// probes against the listener that serves them.
func checkContainer(t *testing.T, d *appsv1.Deployment, c *corev1.Container, cms map[string]*corev1.ConfigMap) {
	t.Helper()
	env := containerEnv(t, c, cms, exampleEnv)
	args := expandArgs(t, c.Args, env)
	acceptsArgs(t, args, append(envList(env), "PATH="+os.Getenv("PATH")))
	if len(args) == 0 || listenFlag[args[0]] == "" {
		t.Errorf("%s/%s: args %q: want a muster command that serves health endpoints", d.Name, c.Name, c.Args)
		return
	}
	flag := listenFlag[args[0]]
	addr := flagValue(args, flag)
	_, listenPort, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s/%s: --%s %q: %v", d.Name, c.Name, flag, addr, err)
		return
	}
	for _, p := range []struct {
		what, path string
		probe      *corev1.Probe
	}{{"livenessProbe", "/livez", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s/%s: no %s by HTTP GET", d.Name, c.Name, p.what)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			t.Errorf("%s/%s: %s GETs %s, want %s", d.Name, c.Name, p.what, g.Path, p.path)
		}
		port, ok := podPort([]corev1.Container{*c}, g.Port)
		switch {
		case !ok:
			t.Errorf("%s/%s: %s's port %s is not a port of the container", d.Name, c.Name, p.what, g.Port.String())
		case strconv.Itoa(int(port)) != listenPort:
			t.Errorf("%s/%s: %s's port %s is %d, but --%s listens on %s", d.Name, c.Name, p.what, g.Port.String(), port, flag, addr)
		}
		if g.Host != "" || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) {
			t.Errorf("%s/%s: %s: host %q, scheme %q: the test sends probes as the kubelet does by default (the pod's address, HTTP)", d.Name, c.Name, p.what, g.Host, g.Scheme)
		}
	}
}

// flagValue is the value of --name in args (--name=value or --name value).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// containerEnv is c's environment as the kubelet makes it: envFrom's
// ConfigMaps, then env, whose fields of the pod come from pod.
func containerEnv(t *testing.T, c *corev1.Container, cms map[string]*corev1.ConfigMap, pod map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || cms[from.ConfigMapRef.Name] == nil {
			t.Fatalf("%s: envFrom %+v: want a ConfigMap of the manifests", c.Name, from)
		}
		maps.Copy(env, cms[from.ConfigMapRef.Name].Data)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && pod[e.ValueFrom.FieldRef.FieldPath] != "":
			env[e.Name] = pod[e.ValueFrom.FieldRef.FieldPath]
		default:
			t.Fatalf("%s: env %s: a source the test does not know", c.Name, e.Name)
		}
	}
	return env
}

func envList(env map[string]string) []string {
	var l []string
	for k, v := range env {
		l = append(l, k+"="+v)
	}
	return l
}

// kubeVar is a reference to a variable in a container's arguments.
var kubeVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArgs expands $(VAR) in args from env, as the kubelet does; a
// variable env does not have fails the test.
func expandArgs(t *testing.T, args []string, env map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = kubeVar.ReplaceAllStringFunc(a, func(v string) string {
			name := kubeVar.FindStringSubmatch(v)[1]
			val, ok := env[name]
			if !ok {
				t.Errorf("argument %q: $(%s) is not in the container's environment", a, name)
			}
			return val
		})
	}
	return out
}

// etcdCredentials are the manifests' variables that name the production
// etcd's credentials, left out when the pod runs against the test
// registry.
var etcdCredentials = []string{"MUSTER_CACERT", "MUSTER_CERT", "MUSTER_KEY", "MUSTER_USER", "MUSTER_PASSWORD_FILE", "MUSTER_PASSWORD"}

// portInArg is a port in an argument (host:port, a URL's port).
var portInArg = regexp.MustCompile(`:([0-9]{1,5})\b`)

// runPod runs d's pod: each container port moves to a free port, the
// muster containers run as processes, the others are stood in for by a
// gRPC health server; then each muster container's probes must answer
// 200, and each of its ports must accept connections.
func runPod(t *testing.T, d *appsv1.Deployment, cms map[string]*corev1.ConfigMap, endpoint string) {
	ip := podIP(t)
	spec := d.Spec.Template.Spec
	moved := map[int32]int{}
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			moved[p.ContainerPort] = freePort(t)
		}
	}
	for _, c := range spec.Containers {
		if !musterImage.MatchString(c.Image) {
			for _, p := range c.Ports {
				serveHealth(t, moved[p.ContainerPort])
			}
		}
	}
	type probe struct {
		container, path, url string
		p                    *process
	}
	var probes []probe
	var ports []string
	for _, c := range musterContainers(d) {
		env := containerEnv(t, c, cms, map[string]string{"status.podIP": ip, "metadata.name": d.Name + "-0", "metadata.namespace": d.Namespace})
		for _, k := range etcdCredentials {
			delete(env, k)
		}
		env["MUSTER_ENDPOINTS"] = endpoint
		args := expandArgs(t, c.Args, env)
		for i, a := range args {
			args[i] = portInArg.ReplaceAllStringFunc(a, func(p string) string {
				n, _ := strconv.Atoi(p[1:])
				if to, ok := moved[int32(n)]; ok {
					return ":" + strconv.Itoa(to)
				}
				return p
			})
		}
		t.Logf("%s: muster %s", c.Name, strings.Join(args, " "))
		proc := start(t, args, append(envList(env), "PATH="+os.Getenv("PATH")))
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			port, _ := podPort([]corev1.Container{*c}, p.HTTPGet.Port)
			probes = append(probes, probe{c.Name, p.HTTPGet.Path,
				"http://" + net.JoinHostPort(ip, strconv.Itoa(moved[port])) + p.HTTPGet.Path, proc})
		}
		for _, p := range c.Ports {
			ports = append(ports, net.JoinHostPort(ip, strconv.Itoa(moved[p.ContainerPort])))
		}
	}
	for _, p := range probes {
		checkProbe(t, p.container, p.path, p.url, p.p)
	}
	for _, addr := range ports {
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Errorf("nothing listens on %s, a port of the pod: %v", addr, err)
			continue
		}
		conn.Close()
	}
}

// checkProbe GETs url as the kubelet does (Host: the pod's address) until
// it answers 200, for at most two minutes; 404 (the command does not
// serve the path), 421 (the listener does not answer to the pod's
// address) and the end of p, the container's process, fail at once.
func checkProbe(t *testing.T, container, path, url string, p *process) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(2 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Errorf("%s: GET %s: the command has ended; output:\n%s", container, url, p.output())
			return
		}
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				return
			case http.StatusNotFound:
				t.Errorf("%s: GET %s: 404 Not Found: this muster does not serve %s, which the probe asks for", container, url, path)
				return
			case http.StatusMisdirectedRequest:
				t.Errorf("%s: GET %s: the listener does not answer to the pod's address, which the kubelet sends as Host: %s %q", container, url, resp.Status, body)
				return
			}
			last = fmt.Sprintf("%s %q", resp.Status, body)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("%s: GET %s: no 200 within two minutes; last: %s", container, url, last)
}

// podIP is the address the test gives its pods: a non-loopback IPv4
// address of this machine when it has one, so that the probes' Host (the
// pod's address, as the kubelet sends it) is one the listeners must be
// told to answer to; loopback otherwise.
func podIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && n.IP.IsGlobalUnicast() {
			if l, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0")); err == nil {
				l.Close()
				return n.IP.String()
			}
		}
	}
	t.Log("no non-loopback IPv4 address: the pod's address is 127.0.0.1, which every listener answers to")
	return "127.0.0.1"
}

// serveHealth serves the standard gRPC health service, SERVING, on
// loopback port, until the test ends.
func serveHealth(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
}
