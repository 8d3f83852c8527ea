package main

// The Helm chart (contrib/helm/tttrace, docs/kubernetes.md) end to end: it
// is rendered by the real helm template (helm's own command, built from
// its Go module at the version contrib/helm/helm.mod pins: go tool), every
// object is decoded strictly (unknown fields refused) into the Kubernetes
// API's types (k8s.io/api; the Prometheus Operator's for the PodMonitor and
// ServiceMonitor), the DaemonSet must run tttrace with exactly the command
// line, capabilities and mounts docs/kubernetes.md states, and tttrace run
// with that command line under those capabilities alone must trace a
// workload in a pod and label its series with the stand-in kubelet's
// names. Two things of the node are put in their place: --all becomes -p
// (the tests of this machine share it with other tracers) and the listen
// address a loopback port; the kubelet's socket is the stand-in's. With
// the OTLP values, the container's environment (downward API, a Secret)
// is resolved as the kubelet does, and its exports go through a loopback
// proxy (which notes their headers) to a real OpenTelemetry Collector: the
// resource, the headers and the pod attributes must be those the chart
// and the stand-in kubelet give.

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tttrace/tttrace/kube/kubelettest"
	"github.com/tttrace/tttrace/sinks/otlp/otlptest"
)

// helmTemplate renders the chart with the real helm (go tool, from
// contrib/helm/helm.mod) and returns its documents.
func helmTemplate(t *testing.T, args ...string) []string {
	t.Helper()
	docs, err := helmTemplateErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// helmTemplateErr is helmTemplate with helm's refusal as an error.
func helmTemplateErr(t *testing.T, args ...string) ([]string, error) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build helm with")
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=../../contrib/helm/helm.mod", "helm", "template", "t", "../../contrib/helm/tttrace", "--namespace", "monitoring"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %v\n%s", err, stderr.String())
	}
	var docs []string
	for _, d := range strings.Split(string(out), "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(d, "---")) != "" {
			docs = append(docs, d)
		}
	}
	return docs, nil
}

// chart is the objects of one rendering, each decoded strictly.
type chart struct {
	ds             *appsv1.DaemonSet
	svc            *corev1.Service
	pm             *monitoringv1.PodMonitor
	sm             *monitoringv1.ServiceMonitor
	kinds          []string
	labelsEveryone map[string]string // labels found on every object
}

func decodeChart(t *testing.T, docs []string) chart {
	t.Helper()
	var c chart
	for _, d := range docs {
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(d), &tm); err != nil {
			t.Fatalf("%v\n%s", err, d)
		}
		var obj any
		var labels map[string]string
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 DaemonSet":
			c.ds = &appsv1.DaemonSet{}
			obj = c.ds
		case "v1 Service":
			c.svc = &corev1.Service{}
			obj = c.svc
		case "monitoring.coreos.com/v1 PodMonitor":
			c.pm = &monitoringv1.PodMonitor{}
			obj = c.pm
		case "monitoring.coreos.com/v1 ServiceMonitor":
			c.sm = &monitoringv1.ServiceMonitor{}
			obj = c.sm
		default:
			t.Fatalf("an object of no type the test knows: %s %s", tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(d), obj); err != nil {
			t.Fatalf("%s: %v\n%s", tm.Kind, err, d)
		}
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			labels = o.Labels
		case *corev1.Service:
			labels = o.Labels
		case *monitoringv1.PodMonitor:
			labels = o.Labels
		case *monitoringv1.ServiceMonitor:
			labels = o.Labels
		}
		if c.labelsEveryone == nil {
			c.labelsEveryone = maps(labels)
		}
		for k, v := range c.labelsEveryone {
			if labels[k] != v {
				delete(c.labelsEveryone, k)
			}
		}
		c.kinds = append(c.kinds, tm.Kind)
	}
	return c
}

func maps(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// docCommand is the DaemonSet's command line as docs/kubernetes.md states
// it: the first line starting "tttrace --all" in its "The Helm chart"
// section.
func docCommand(t *testing.T) ([]string, string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## The Helm chart")
	if !ok {
		t.Fatal("docs/kubernetes.md has no section The Helm chart")
	}
	for _, l := range strings.Split(sec, "\n") {
		if strings.HasPrefix(l, "tttrace --all") {
			return strings.Fields(l), sec
		}
	}
	t.Fatal("docs/kubernetes.md states no command line of the DaemonSet")
	return nil, ""
}

func TestE2EHelmChart(t *testing.T) {
	docs := helmTemplate(t, "--set", "podMonitor.enabled=true", "--set", "serviceMonitor.enabled=true",
		"--set", "commonLabels.team=ml-infra", "--set", "podLabels.tier=observability")
	c := decodeChart(t, docs)
	slices.Sort(c.kinds)
	if strings.Join(c.kinds, ",") != "DaemonSet,PodMonitor,Service,ServiceMonitor" {
		t.Fatalf("objects %v", c.kinds)
	}
	if c.labelsEveryone["team"] != "ml-infra" || c.labelsEveryone["app.kubernetes.io/name"] != "tttrace" {
		t.Errorf("labels on every object: %v", c.labelsEveryone)
	}
	ds := c.ds
	pod := ds.Spec.Template.Spec
	if ds.Spec.Template.Labels["tier"] != "observability" || ds.Spec.Template.Labels["team"] != "ml-infra" {
		t.Errorf("pod labels %v", ds.Spec.Template.Labels)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v || c.svc.Spec.Selector[k] != v || c.pm.Spec.Selector.MatchLabels[k] != v || c.sm.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("selector %s=%s does not select the pods everywhere", k, v)
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	ctr := pod.Containers[0]

	// The command line and the privileges, as the docs state them.
	want, sec := docCommand(t)
	got := append(append([]string{}, ctr.Command...), ctr.Args...)
	got[0] = filepath.Base(got[0])
	for i := range got {
		if got[i] == "" {
			got[i] = `""`
		}
	}
	wantLine := strings.Join(want, " ")
	if strings.Join(got, " ") != wantLine {
		t.Errorf("the DaemonSet runs\n  %s\ndocs/kubernetes.md says\n  %s", strings.Join(got, " "), wantLine)
	}
	sc := ctr.SecurityContext
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	docCaps := "`" + strings.Join(add, "`, `") + "`"
	switch {
	case !pod.HostPID || pod.HostNetwork || pod.HostIPC:
		t.Errorf("hostPID %v, hostNetwork %v, hostIPC %v: want hostPID only", pod.HostPID, pod.HostNetwork, pod.HostIPC)
	case sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privileged, or privilege escalation allowed")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("a writable root file system")
	case len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("drops %v, want ALL", sc.Capabilities.Drop)
	case !strings.Contains(sec, "capabilities "+docCaps+" alone"):
		t.Errorf("docs/kubernetes.md does not state the capabilities %s", docCaps)
	case pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken:
		t.Error("a service account token mounted")
	}
	if len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].MountPath != "/var/lib/kubelet/pod-resources" || !ctr.VolumeMounts[0].ReadOnly ||
		len(pod.Volumes) != 1 || pod.Volumes[0].HostPath == nil || pod.Volumes[0].HostPath.Path != "/var/lib/kubelet/pod-resources" {
		t.Errorf("mounts %+v, volumes %+v: want the pod-resources directory alone, read-only", ctr.VolumeMounts, pod.Volumes)
	}
	if !strings.Contains(sec, "`/var/lib/kubelet/pod-resources`") {
		t.Error("docs/kubernetes.md does not state the mount")
	}
	if ctr.Resources.Limits.Memory().IsZero() {
		t.Error("no memory limit")
	}
	port := ctr.Ports[0]
	if port.Name != "metrics" || c.svc.Spec.Ports[0].TargetPort.StrVal != "metrics" || c.pm.Spec.PodMetricsEndpoints[0].Port == nil ||
		*c.pm.Spec.PodMetricsEndpoints[0].Port != "metrics" || c.sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("the metrics port is not what the Service and monitors scrape")
	}

	// Without the pod-resources socket: no mount, and tttrace told not to
	// ask.
	off := decodeChart(t, helmTemplate(t, "--set", "podResources.enabled=false"))
	octr := off.ds.Spec.Template.Spec.Containers[0]
	if len(octr.VolumeMounts) != 0 || len(off.ds.Spec.Template.Spec.Volumes) != 0 || !slices.Contains(octr.Args, "--pod-resources") ||
		octr.Args[slices.Index(octr.Args, "--pod-resources")+1] != "" || off.pm != nil || off.sm != nil {
		t.Errorf("podResources.enabled=false: args %q, mounts %v, monitors %v %v", octr.Args, octr.VolumeMounts, off.pm, off.sm)
	}

	// OTLP: off by default; on, the DaemonSet adds --otlp and its
	// interval, the resource attributes and the headers from the Secret.
	for _, e := range ctr.Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("OTLP off, yet %s is set", e.Name)
		}
	}
	const endpoint = "http://otel-collector.monitoring:4318"
	on := decodeChart(t, helmTemplate(t, "--set", "otlp.enabled=true", "--set", "otlp.endpoint="+endpoint, "--set", "otlp.interval=1s",
		"--set", "otlp.headersSecret.name=otlp-auth", "--set", `otlp.resourceAttributes.k8s\.cluster\.name=prod-a`))
	octr = on.ds.Spec.Template.Spec.Containers[0]
	if want := append(append([]string{}, ctr.Args...), "--otlp", endpoint, "--otlp-interval", "1s"); !slices.Equal(octr.Args, want) {
		t.Errorf("otlp.enabled: args\n  %q\nwant\n  %q", octr.Args, want)
	}
	if !strings.Contains(sec, "`--otlp ENDPOINT --otlp-interval INTERVAL`") {
		t.Error("docs/kubernetes.md does not state the OTLP arguments")
	}
	env := kubeletEnv(t, octr.Env)
	for k, v := range map[string]string{
		"OTEL_RESOURCE_ATTRIBUTES":           "k8s.node.name=node-7,service.instance.id=" + podUID + ",k8s.cluster.name=prod-a",
		"OTEL_EXPORTER_OTLP_METRICS_HEADERS": otlpSecret["headers"],
	} {
		if env[k] != v {
			t.Errorf("otlp.enabled: %s=%q, want %q", k, env[k], v)
		}
	}
	if _, err := helmTemplateErr(t, "--set", "otlp.enabled=true"); err == nil || !strings.Contains(err.Error(), "otlp.enabled needs otlp.endpoint") {
		t.Errorf("otlp.enabled without an endpoint: %v", err)
	}

	// tttrace with the DaemonSet's command line and capabilities alone,
	// exporting to a real collector where there is one.
	if col, why := findOtelcol(t); col != "" {
		runAsDaemonSet(t, octr, col)
	} else {
		t.Log(why + ": the DaemonSet runs without its OTLP values")
		runAsDaemonSet(t, ctr, "")
	}
}

// The pod and the Secret the test's kubelet knows.
const podUID = "5b1d7c9e-3f2a-4e8b-9c0d-1a2b3c4d5e6f"

var otlpSecret = map[string]string{"headers": "authorization=Bearer t0ken-of-the-test"}

// kubeletEnv resolves a container's environment as the kubelet does: the
// downward API's spec.nodeName (node-7) and metadata.uid (podUID), the
// Secret otlp-auth (otlpSecret), and $(VAR) of a variable defined before
// ($$ an escaped $, an unknown $(VAR) left as it is).
func kubeletEnv(t *testing.T, vars []corev1.EnvVar) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range vars {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = expandKubelet(e.Value, out)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			out[e.Name] = "node-7"
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid":
			out[e.Name] = podUID
		case e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "otlp-auth":
			v, ok := otlpSecret[e.ValueFrom.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("%s: the Secret otlp-auth has no key %q", e.Name, e.ValueFrom.SecretKeyRef.Key)
			}
			out[e.Name] = v
		default:
			t.Fatalf("%s: a source the test does not know: %+v", e.Name, e.ValueFrom)
		}
	}
	return out
}

// expandKubelet expands $(VAR) in s from vars, as the kubelet does in env
// values, command and args.
func expandKubelet(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if j := strings.IndexByte(s[i:], ')'); j > 0 {
				if v, ok := vars[s[i+2:i+j]]; ok {
					b.WriteString(v)
					i += j
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runAsDaemonSet runs tttrace as the DaemonSet's container would (its args,
// $(NODE_NAME) expanded, its capabilities the only ones, no new
// privileges), --all and the listen address replaced as the file's comment
// says, on a workload in a pod whose devices the stand-in kubelet gave it.
func runAsDaemonSet(t *testing.T, ctr corev1.Container, otelcol string) {
	bin, replica := setup(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	cg := cgroup2Root(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	root := devRoot(t, map[int]string{0: "0000:05:00.0"})
	sock := f("kubelet.sock")
	k, err := kubelettest.Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	k.Set(kubelettest.Pod("ml", "trainer-0", kubelettest.Container("worker", "tenstorrent.com/n150", "0000:05:00.0")))

	uid, cid := randomUID(t), randomHex(t, 64)
	w := exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150",
		"--truth", f("w.truth"), "--go-file", f("w.go"), "--hold-file", f("w.hold"))
	holdChip(t, w, 0)
	wout := &syncBuffer{}
	w.Stdout, w.Stderr = wout, wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.ProcessState == nil {
			w.Process.Kill()
			w.Wait()
		}
	})
	podCgroup(t, cg, "/kubepods.slice/kubepods-pod"+strings.ReplaceAll(uid, "-", "_")+".slice/cri-containerd-"+cid+".scope", w.Process.Pid)
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")

	env := kubeletEnv(t, ctr.Env)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// The collector, behind a proxy noting the headers of its requests.
	var exports string
	var proxyMu sync.Mutex
	var auth []string
	proxyURL := ""
	if otelcol != "" {
		exports = f("exports.jsonl")
		target, err := url.Parse(startCollector(t, otelcol, exports))
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxyMu.Lock()
			auth = append(auth, r.Header.Get("Authorization"))
			proxyMu.Unlock()
			rp.ServeHTTP(w, r)
		}))
		defer proxy.Close()
		proxyURL = proxy.URL
	}
	var args []string
	for i := 0; i < len(ctr.Args); i++ {
		a := expandKubelet(ctr.Args[i], env)
		switch {
		case a == "--otlp":
			if proxyURL == "" {
				t.Fatal("--otlp without a collector to send to")
			}
			args = append(args, a, proxyURL)
			i++
		case a == "--all":
			args = append(args, "-p", strconv.Itoa(w.Process.Pid))
		case a == "--listen":
			args = append(args, a, addr)
			i++
		case a == "--pod-resources":
			args = append(args, a, sock)
			i++
		default:
			args = append(args, a)
		}
	}
	args = append(args, "--lib", filepath.Join(dir, "libtt_metal.so"), "--dev-root", root, "--ready-file", f("ready"))
	caps := "-all"
	for _, c := range ctr.SecurityContext.Capabilities.Add {
		caps += ",+" + strings.ToLower(string(c))
	}
	tt := exec.Command("setpriv", append([]string{"--bounding-set", caps, "--no-new-privs", "--", bin}, args...)...)
	tt.Env = os.Environ()
	for k, v := range env {
		tt.Env = append(tt.Env, k+"="+v)
	}
	tout := &syncBuffer{}
	tt.Stdout, tt.Stderr = tout, tout
	tt.WaitDelay = 5 * time.Second
	if err := tt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if tt.ProcessState == nil {
			tt.Process.Kill()
			tt.Wait()
		}
	})
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready\n"+tout.String())
	touch(t, f("w.go"))
	waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding\n"+wout.String())

	// The probes' path answers; the series carry the node and the pod.
	probe := ctr.ReadinessProbe.HTTPGet.Path
	resp, err := httpClient.Get("http://" + addr + probe)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the probes' %s: %s", probe, resp.Status)
	}
	pid := strconv.Itoa(w.Process.Pid)
	poll(t, "pod labels under the DaemonSet's privileges", func() string {
		fams, err := scrapeFamilies(addr, "tttrace_device_memory_bytes")
		if err != nil {
			return err.Error()
		}
		var diffs []string
		n := 0
		for _, s := range fams["tttrace_device_memory_bytes"] {
			if s.labels["pid"] != pid {
				continue
			}
			n++
			if s.labels["pod"] != "trainer-0" || s.labels["namespace"] != "ml" || s.labels["container"] != "worker" {
				diffs = append(diffs, fmt.Sprintf("labels %v", s.labels))
			}
		}
		if n == 0 {
			diffs = append(diffs, "no series of pid "+pid+"\n"+tout.String())
		}
		return strings.Join(diffs, "\n")
	})
	if otelcol != "" {
		// The collector gets the workload's series with its pod, under
		// the chart's resource and the Secret's headers.
		m, err := otlptest.ReadDoc("../../docs/otlp.md")
		if err != nil {
			t.Fatal(err)
		}
		poll(t, "the pod's series at the collector", func() string {
			reqs, err := readExports(exports)
			if err != nil || len(reqs) == 0 {
				return fmt.Sprintf("%d exports, %v", len(reqs), err)
			}
			req := reqs[len(reqs)-1]
			series, problems := m.Series(req)
			if len(problems) != 0 {
				return strings.Join(problems, "; ")
			}
			got := otlpSeries(series).sum(t, "tttrace_device_memory_bytes", map[string]string{"pid": pid}, "pod", "namespace", "container", "host")
			if d := sameSamples(mapsKeys(got), map[string]float64{"pod=trainer-0,namespace=ml,container=worker,host=node-7": 1}); d != "" {
				return "pod attributes: " + d
			}
			res := otlptest.Resource(req)
			for k, v := range map[string]string{"k8s.node.name": "node-7", "service.instance.id": podUID, "k8s.cluster.name": "prod-a", "host.name": "node-7"} {
				if res[k] != v {
					return fmt.Sprintf("resource %s=%q, want %q (%v)", k, res[k], v, res)
				}
			}
			if _, ok := res["k8s.pod.name"]; ok {
				return fmt.Sprintf("the resource names a pod: %v", res)
			}
			return ""
		})
		proxyMu.Lock()
		if len(auth) == 0 {
			t.Error("no export went through the proxy")
		}
		for _, a := range auth {
			if a != "Bearer t0ken-of-the-test" {
				t.Errorf("an export with Authorization %q, want the Secret's", a)
			}
		}
		proxyMu.Unlock()
	}
	touch(t, f("w.hold"))
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
}

// mapsKeys is m with every value 1: which keys it has.
func mapsKeys(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k := range m {
		out[k] = 1
	}
	return out
}
