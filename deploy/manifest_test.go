package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

// ---- the few Kubernetes fields the rules look at ----

type meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type keyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type envVar struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
		ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
		FieldRef        *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
		ResourceFieldRef any `yaml:"resourceFieldRef"`
	} `yaml:"valueFrom"`
}

type envFrom struct {
	ConfigMapRef *struct {
		Name string `yaml:"name"`
	} `yaml:"configMapRef"`
	SecretRef any `yaml:"secretRef"`
}

type probe struct {
	GRPC *struct {
		Port    int     `yaml:"port"`
		Service *string `yaml:"service"`
	} `yaml:"grpc"`
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket any `yaml:"tcpSocket"`
	Exec      any `yaml:"exec"`
}

type container struct {
	Name    string    `yaml:"name"`
	Image   string    `yaml:"image"`
	Command []string  `yaml:"command"`
	Args    []string  `yaml:"args"`
	Env     []envVar  `yaml:"env"`
	EnvFrom []envFrom `yaml:"envFrom"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type podTemplate struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		InitContainers []container `yaml:"initContainers"`
		Containers     []container `yaml:"containers"`
		Volumes        []struct {
			Name   string `yaml:"name"`
			Secret *struct {
				SecretName string `yaml:"secretName"`
				Items      []struct {
					Key  string `yaml:"key"`
					Path string `yaml:"path"`
				} `yaml:"items"`
			} `yaml:"secret"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type selector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		// Deployment, Job, StatefulSet, DaemonSet
		Replicas *int        `yaml:"replicas"`
		Selector yaml.Node   `yaml:"selector"` // a label selector, or a Service's plain map
		Template podTemplate `yaml:"template"`
		// PodDisruptionBudget
		MinAvailable   any `yaml:"minAvailable"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		// HorizontalPodAutoscaler
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas *int `yaml:"minReplicas"`
		MaxReplicas int  `yaml:"maxReplicas"`
		// Service
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
		// Ingress
		TLS []struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"tls"`
		Rules []struct {
			HTTP struct {
				Paths []struct {
					Backend struct {
						Service struct {
							Name string `yaml:"name"`
							Port struct {
								Name   string `yaml:"name"`
								Number int    `yaml:"number"`
							} `yaml:"port"`
						} `yaml:"service"`
					} `yaml:"backend"`
				} `yaml:"paths"`
			} `yaml:"http"`
		} `yaml:"rules"`
	} `yaml:"spec"`
}

func (o object) id() string { return o.Kind + "/" + o.Metadata.Name }

// namespace is where the object lands: the overlay's namespace, or the one kubectl applies the
// base to.
func (o object) namespace() string {
	if o.Metadata.Namespace == "" {
		return "default"
	}
	return o.Metadata.Namespace
}

// secretFile finds the Secret key behind a file path of container c: path must be
// <mountPath>/<file> of a read-only mount of a Secret volume of o's pods.
func (o object) secretFile(c container, path string) (secret, key string, ok bool) {
	for _, m := range c.VolumeMounts {
		rel, found := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !found || !m.ReadOnly || m.SubPath != "" {
			continue
		}
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 {
				return v.Secret.SecretName, rel, true
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return v.Secret.SecretName, it.Key, true
				}
			}
		}
	}
	return "", "", false
}

// matchLabels reads spec.selector as a label selector ({matchLabels: ...}) or, for a Service,
// a plain map.
func (o object) matchLabels(t *testing.T) map[string]string {
	t.Helper()
	if o.Spec.Selector.Kind == 0 {
		return nil
	}
	if o.Kind == "Service" {
		var m map[string]string
		require.NoError(t, o.Spec.Selector.Decode(&m))
		return m
	}
	var s selector
	require.NoError(t, o.Spec.Selector.Decode(&s))
	return s.MatchLabels
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// render runs `kubectl kustomize dir` and decodes every object.
func render(t *testing.T, dir string) []object {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	require.NoError(t, err, "kubectl is needed to render the kustomizations")
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kubectl kustomize %s: %s", dir, stderr.String())
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "decoding the output of kubectl kustomize %s", dir)
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	require.NotEmpty(t, objs, "%s rendered nothing", dir)
	return objs
}

// kustomizations are the base and every overlay: all must render and obey the rules.
func kustomizations(t *testing.T) []string {
	t.Helper()
	overlays, err := filepath.Glob(filepath.Join(deployRoot, "k8s", "overlays", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, overlays, "no overlays under deploy/k8s/overlays")
	return append([]string{filepath.Join(deployRoot, "k8s", "base")}, overlays...)
}

// workloads are the objects with a pod template.
var workloadKinds = map[string]bool{"Deployment": true, "StatefulSet": true, "DaemonSet": true, "Job": true, "CronJob": true}

// ourImage returns the image's millwright target ("policy" for millwright/policy:dev), or "".
func ourImage(image string) string {
	name := image
	if i := strings.LastIndex(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	if !strings.HasPrefix(name, "millwright/") && !strings.Contains(name, "/millwright/") {
		return ""
	}
	return name[strings.LastIndex(name, "/")+1:]
}

// TestKustomizations renders the base and every overlay and checks, for each:
// replicas, probes, resources, secrets only by reference, one PDB, HPA and Service per
// Deployment, a migration Job per service on the same database, the Ingress backend, the
// upstream addresses, and every flag and environment variable against the binaries' -h.
func TestKustomizations(t *testing.T) {
	targets := dockerfileTargets(t)
	runbook, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	require.NoError(t, err, "docs/operations.md documents the Secrets the manifests reference")
	for _, dir := range kustomizations(t) {
		name, _ := filepath.Rel(deployRoot, dir)
		t.Run(name, func(t *testing.T) {
			objs := render(t, dir)
			checkObjects(t, objs, targets, string(runbook))
		})
	}
}

func checkObjects(t *testing.T, objs []object, targets map[string]dockerTarget, runbook string) {
	configMaps := map[string]map[string]string{}
	services := map[string]object{}
	var deployments, jobs []object
	for _, o := range objs {
		switch o.Kind {
		case "Secret":
			t.Errorf("%s: Secrets are never rendered from git; reference one created out of band", o.id())
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
			for k, v := range o.Data {
				if secretName.MatchString(k) && !strings.HasPrefix(k, "OTEL_") && !strings.HasSuffix(k, ".yaml") {
					t.Errorf("%s: key %s looks like a secret; put it in a Secret", o.id(), k)
				}
				if credentialInURL.MatchString(v) {
					t.Errorf("%s: key %s holds a URL with a password", o.id(), k)
				}
			}
		case "Service":
			services[o.Metadata.Name] = o
		case "Deployment":
			deployments = append(deployments, o)
		case "Job":
			jobs = append(jobs, o)
		}
	}
	require.NotEmpty(t, deployments)
	require.NotEmpty(t, jobs, "the migration jobs")

	secretRefs := map[string]bool{}
	type dbUse struct{ image, secret string }
	served := map[string]dbUse{}   // service binary -> what its Deployment uses
	migrated := map[string]dbUse{} // service binary -> what its migrate Job uses

	for _, o := range objs {
		if !workloadKinds[o.Kind] {
			continue
		}
		for _, c := range append(append([]container{}, o.Spec.Template.Spec.InitContainers...), o.Spec.Template.Spec.Containers...) {
			where := o.id() + " container " + c.Name
			for _, r := range []string{"cpu", "memory"} {
				if c.Resources.Requests[r] == "" {
					t.Errorf("%s: no %s request", where, r)
				}
				if c.Resources.Limits[r] == "" {
					t.Errorf("%s: no %s limit", where, r)
				}
			}
			names, values := containerEnv(t, where, o, c, configMaps, secretRefs)
			target := ourImage(c.Image)
			if target == "" {
				continue // a third-party image (the collector): generic rules only
			}
			dt, ok := targets[target]
			require.True(t, ok, "%s: image %s has no Dockerfile target %q", where, c.Image, target)
			argv := append(append([]string{}, c.Command...), c.Args...)
			if len(c.Command) == 0 {
				argv = append(append([]string{}, dt.entrypoint...), c.Args...)
			}
			require.NotEmpty(t, argv, "%s: no command", where)
			require.Contains(t, dt.files, argv[0], "%s: %s is not in image target %s", where, argv[0], target)
			inv, h := parseInvocation(t, where, argv)
			checkConfig(t, where, inv, h, names, values)

			sub := strings.Join(inv.sub, " ")
			db := ""
			for _, e := range c.Env {
				if e.Name == "DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					db = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
			}
			switch {
			case o.Kind == "Deployment" && sub == "serve":
				checkPorts(t, where, c, inv, h, values)
				checkProxy(t, where, o, c, inv, h, values, services)
				if _, ok := h.flags["database-url"]; ok {
					require.NotEmpty(t, db, "%s: DATABASE_URL must come from a Secret", where)
					served[inv.bin] = dbUse{c.Image, db}
				}
			case o.Kind == "Job" && sub == "migrate":
				require.NotEmpty(t, db, "%s: DATABASE_URL must come from a Secret", where)
				migrated[inv.bin] = dbUse{c.Image, db}
			}
		}
	}

	for _, d := range deployments {
		labels := d.Spec.Template.Metadata.Labels
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("%s: replicas must be at least 2", d.id())
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s container %s: needs both a readiness and a liveness probe", d.id(), c.Name)
			}
		}
		var pdb, hpa, svc bool
		for _, o := range objs {
			switch o.Kind {
			case "PodDisruptionBudget":
				if selects(o.matchLabels(t), labels) {
					pdb = true
					if o.Spec.MinAvailable == nil && o.Spec.MaxUnavailable == nil {
						t.Errorf("%s: neither minAvailable nor maxUnavailable", o.id())
					}
				}
			case "HorizontalPodAutoscaler":
				if o.Spec.ScaleTargetRef.Kind == "Deployment" && o.Spec.ScaleTargetRef.Name == d.Metadata.Name {
					hpa = true
					if o.Spec.MinReplicas == nil || *o.Spec.MinReplicas < 2 || o.Spec.MaxReplicas < *o.Spec.MinReplicas {
						t.Errorf("%s: minReplicas must be at least 2 and maxReplicas at least that", o.id())
					}
				}
			case "Service":
				if selects(o.matchLabels(t), labels) {
					svc = true
					checkServicePorts(t, o, d)
				}
			}
		}
		if !pdb {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", d.id())
		}
		if !hpa {
			t.Errorf("%s: no HorizontalPodAutoscaler targets it", d.id())
		}
		if !svc {
			t.Errorf("%s: no Service selects its pods", d.id())
		}
	}

	for bin, s := range served {
		m, ok := migrated[bin]
		if !ok {
			t.Errorf("%s serves from a database but no Job runs `%s migrate`", bin, bin)
			continue
		}
		if m != s {
			t.Errorf("%s: the migrate Job uses %+v, the Deployment %+v: they must be the same image and database", bin, m, s)
		}
	}

	// Upstream addresses name a Service and one of its ports.
	for _, d := range deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			_, values := containerEnv(t, d.id(), d, c, configMaps, map[string]bool{})
			for k, v := range values {
				if !strings.HasSuffix(k, "_ADDR") || strings.HasPrefix(v, ":") || v == "" {
					continue
				}
				host := strings.SplitN(strings.TrimPrefix(v, "dns:///"), ":", 2)[0]
				host = strings.SplitN(host, ".", 2)[0]
				port, _ := strconv.Atoi(addrPort(v))
				s, ok := services[host]
				if !ok {
					t.Errorf("%s: %s=%s names no Service", d.id(), k, v)
					continue
				}
				found := false
				for _, p := range s.Spec.Ports {
					found = found || p.Port == port
				}
				if !found {
					t.Errorf("%s: %s=%s: Service %s has no port %d", d.id(), k, v, host, port)
				}
			}
		}
	}

	for _, o := range objs {
		if o.Kind != "Ingress" {
			continue
		}
		for _, tls := range o.Spec.TLS {
			secretRefs[tls.SecretName] = true
		}
		for _, r := range o.Spec.Rules {
			for _, p := range r.HTTP.Paths {
				b := p.Backend.Service
				s, ok := services[b.Name]
				if !ok {
					t.Errorf("%s: backend Service %s does not exist", o.id(), b.Name)
					continue
				}
				found := false
				for _, sp := range s.Spec.Ports {
					found = found || (b.Port.Name != "" && sp.Name == b.Port.Name) || (b.Port.Number != 0 && sp.Port == b.Port.Number)
				}
				if !found {
					t.Errorf("%s: Service %s has no port %+v", o.id(), b.Name, b.Port)
				}
			}
		}
	}
	if !hasKind(objs, "Ingress") {
		t.Error("no Ingress for the gateway")
	}

	// Every Secret the manifests need is one the runbook tells the operator about (or one
	// CloudNativePG writes, which the runbook names by its pattern).
	for name := range secretRefs {
		if strings.HasSuffix(name, "-db-app") && strings.Contains(runbook, "<cluster>-app") {
			continue
		}
		if !strings.Contains(runbook, "`"+name+"`") {
			t.Errorf("Secret %s is referenced but docs/operations.md does not document it", name)
		}
	}
}

func hasKind(objs []object, kind string) bool {
	for _, o := range objs {
		if o.Kind == kind {
			return true
		}
	}
	return false
}

// envRef is a $(VAR) reference in an env value, which Kubernetes expands from the variables
// defined before it.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv returns the names of every environment variable a container of o gets and the
// literal values among them (env values, expanded as Kubernetes does, ConfigMap entries and
// the pod's namespace). A name that looks like a secret must come from a secretKeyRef, or be
// the path of a file of a Secret mounted read-only; envFrom a Secret is refused because its
// keys are invisible to review and to this test. A variable of the downward API that only
// serves to build another one's value is left out of the names: no binary need read it.
func containerEnv(t *testing.T, where string, o object, c container, configMaps map[string]map[string]string, secretRefs map[string]bool) ([]string, map[string]string) {
	t.Helper()
	var names []string
	values := map[string]string{}
	downward, referenced := map[string]bool{}, map[string]bool{}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil {
			t.Errorf("%s: envFrom a Secret; reference each key with secretKeyRef instead", where)
		}
		if ef.ConfigMapRef != nil {
			data, ok := configMaps[ef.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %s is not rendered", where, ef.ConfigMapRef.Name)
			}
			for k, v := range data {
				names = append(names, k)
				values[k] = v
			}
		}
	}
	for _, e := range c.Env {
		names = append(names, e.Name)
		fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		if fromSecret {
			secretRefs[e.ValueFrom.SecretKeyRef.Name] = true
			delete(values, e.Name)
		}
		if e.Value != nil {
			if s, _, ok := o.secretFile(c, *e.Value); ok {
				secretRefs[s] = true
				fromSecret = true
			}
		}
		if secretName.MatchString(e.Name) && !allowedForeignEnv(e.Name) && !fromSecret {
			t.Errorf("%s: %s must come from a secretKeyRef or a file of a Secret mounted read-only, never a value or a ConfigMap", where, e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			downward[e.Name] = true
			if e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
				values[e.Name] = o.namespace()
			}
		}
		if e.Value != nil {
			v := envRef.ReplaceAllStringFunc(*e.Value, func(ref string) string {
				name := envRef.FindStringSubmatch(ref)[1]
				referenced[name] = true
				if val, ok := values[name]; ok {
					return val
				}
				return ref
			})
			values[e.Name] = v
			if credentialInURL.MatchString(v) {
				t.Errorf("%s: %s holds a URL with a password", where, e.Name)
			}
		}
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := configMaps[ref.Name][ref.Key]
			if !ok {
				t.Errorf("%s: %s: ConfigMap %s has no key %s", where, e.Name, ref.Name, ref.Key)
			}
			values[e.Name] = v
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return downward[n] && referenced[n] })
	return names, values
}

func containerPort(c container, name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// probePort resolves a probe's port (a number or a container port name).
func probePort(c container, p any) int {
	switch v := p.(type) {
	case int:
		return v
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		return containerPort(c, v)
	}
	return 0
}

// checkPorts ties the addresses the binary will listen on to the container's ports and
// probes: gRPC services get native grpc probes on their gRPC port, readiness on the server as a
// whole and liveness on the "liveness" health service (up whatever the database); the gateway
// gets /healthz for readiness and an HTTP liveness probe.
func checkPorts(t *testing.T, where string, c container, inv invocation, h *help, values map[string]string) {
	t.Helper()
	port := func(flag string) int {
		v, _ := effective(h.flags[flag], inv, values)
		n, _ := strconv.Atoi(addrPort(v))
		return n
	}
	if _, ok := h.flags["grpc-addr"]; ok {
		g := port("grpc-addr")
		if g == 0 || containerPort(c, "grpc") != g {
			t.Errorf("%s: listens for gRPC on port %d but its container port \"grpc\" is %d", where, g, containerPort(c, "grpc"))
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.ReadinessProbe.GRPC.Port != g {
			t.Errorf("%s: readiness must be the native grpc probe on port %d", where, g)
		}
		m := port("metrics-addr")
		if m == 0 || containerPort(c, "metrics") != m {
			t.Errorf("%s: metrics on port %d but its container port \"metrics\" is %d", where, m, containerPort(c, "metrics"))
		}
		if c.ReadinessProbe != nil && c.ReadinessProbe.GRPC != nil && c.ReadinessProbe.GRPC.Service != nil && *c.ReadinessProbe.GRPC.Service != "" {
			t.Errorf("%s: readiness must ask the server as a whole (no service name)", where)
		}
		lp := c.LivenessProbe
		if lp == nil || lp.GRPC == nil || lp.GRPC.Port != g || lp.GRPC.Service == nil || *lp.GRPC.Service != "liveness" {
			t.Errorf("%s: liveness must be the native grpc probe on port %d, service \"liveness\" (up while the process runs, whatever the database)", where, g)
		}
		return
	}
	if _, ok := h.flags["http-addr"]; ok {
		p := port("http-addr")
		if p == 0 || containerPort(c, "http") != p {
			t.Errorf("%s: listens for HTTP on port %d but its container port \"http\" is %d", where, p, containerPort(c, "http"))
		}
		rp := c.ReadinessProbe
		if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/healthz" || probePort(c, rp.HTTPGet.Port) != p {
			t.Errorf("%s: readiness must be GET /healthz on port %d", where, p)
		}
		lp := c.LivenessProbe
		if lp == nil || lp.HTTPGet == nil || probePort(c, lp.HTTPGet.Port) != p {
			t.Errorf("%s: liveness must be an HTTP GET on port %d", where, p)
		}
		return
	}
	t.Errorf("%s: `%s serve` has neither -grpc-addr nor -http-addr: update this test", where, inv.bin)
}

// checkProxy: a binary with -proxy-addr (roleset) runs its PostgreSQL proxy. It listens on its
// container port "postgres-proxy", a Service selecting its pods exposes that port,
// -proxy-advertise (what ResolveConnection tells jobs) is that Service's cluster DNS name
// <service>.<namespace>.svc and port, and the TLS certificate and key are tls.crt and tls.key
// of one Secret (the keys of a kubernetes.io/tls Secret) mounted read-only.
func checkProxy(t *testing.T, where string, o object, c container, inv invocation, h *help, values map[string]string, services map[string]object) {
	t.Helper()
	f, ok := h.flags["proxy-addr"]
	if !ok {
		return
	}
	addr, _ := effective(f, inv, values)
	port, _ := strconv.Atoi(addrPort(addr))
	if port == 0 {
		t.Errorf("%s: -proxy-addr (env %s) is %q: the PostgreSQL proxy must listen on a port", where, f.env, addr)
		return
	}
	if containerPort(c, "postgres-proxy") != port {
		t.Errorf("%s: the proxy listens on port %d but its container port \"postgres-proxy\" is %d", where, port, containerPort(c, "postgres-proxy"))
	}
	var want []string
	for _, s := range services {
		if !selects(s.matchLabels(t), o.Spec.Template.Metadata.Labels) {
			continue
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target == nil {
				target = p.Port
			}
			if probePort(c, target) == port {
				want = append(want, net.JoinHostPort(s.Metadata.Name+"."+s.namespace()+".svc", strconv.Itoa(p.Port)))
			}
		}
	}
	adv, _ := effective(h.flags["proxy-advertise"], inv, values)
	switch {
	case len(want) == 0:
		t.Errorf("%s: no Service selecting its pods exposes the proxy port %d", where, port)
	case !slices.Contains(want, adv):
		t.Errorf("%s: -proxy-advertise is %q; jobs must be told the Service's DNS name and port, one of %v", where, adv, want)
	}
	cert, _ := effective(h.flags["proxy-tls-cert"], inv, values)
	key, _ := effective(h.flags["proxy-tls-key"], inv, values)
	certSecret, certKey, certOK := o.secretFile(c, cert)
	keySecret, keyKey, keyOK := o.secretFile(c, key)
	if !certOK || !keyOK || certSecret != keySecret || certKey != "tls.crt" || keyKey != "tls.key" {
		t.Errorf("%s: -proxy-tls-cert %q and -proxy-tls-key %q must be tls.crt and tls.key of one kubernetes.io/tls Secret mounted read-only", where, cert, key)
	}
}

func checkServicePorts(t *testing.T, s, d object) {
	t.Helper()
	for _, p := range s.Spec.Ports {
		ok := false
		for _, c := range d.Spec.Template.Spec.Containers {
			ok = ok || probePort(c, p.TargetPort) != 0 || (p.TargetPort == nil && probePort(c, p.Port) != 0)
			if n, isInt := p.TargetPort.(int); isInt {
				for _, cp := range c.Ports {
					ok = ok || cp.ContainerPort == n
				}
			}
		}
		if !ok {
			t.Errorf("%s port %s: targetPort %v is no container port of %s", s.id(), p.Name, p.TargetPort, d.id())
		}
	}
}

// ---- the Dockerfile ----

// dockerTarget is one final stage of deploy/Dockerfile: the files it copies in and its
// ENTRYPOINT.
type dockerTarget struct {
	files      []string
	entrypoint []string
}

var (
	fromRe  = regexp.MustCompile(`(?i)^FROM\s+\S+\s+AS\s+(\S+)`)
	copyRe  = regexp.MustCompile(`(?i)^COPY\s+--from=\S+\s+\S+\s+(\S+)`)
	entryRe = regexp.MustCompile(`(?i)^ENTRYPOINT\s+\[(.*)\]`)
	userRe  = regexp.MustCompile(`(?i)^USER\s+(\S+)`)
)

// dockerfileTargets parses deploy/Dockerfile's stages, and checks the image rules: distroless
// static runtime, a non-root numeric USER, the probe in every final image.
func dockerfileTargets(t *testing.T) map[string]dockerTarget {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(deployRoot, "Dockerfile"))
	require.NoError(t, err)
	require.Contains(t, string(src), "CGO_ENABLED=0", "static binaries")
	require.Contains(t, string(src), "gcr.io/distroless/static", "distroless static runtime")
	targets := map[string]dockerTarget{}
	users := map[string]string{}
	stage := ""
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		if m := fromRe.FindStringSubmatch(line); m != nil {
			stage = m[1]
			continue
		}
		if stage == "" || stage == "build" {
			continue
		}
		tg := targets[stage]
		if m := copyRe.FindStringSubmatch(line); m != nil {
			tg.files = append(tg.files, m[1])
		}
		if m := entryRe.FindStringSubmatch(line); m != nil {
			for _, p := range strings.Split(m[1], ",") {
				tg.entrypoint = append(tg.entrypoint, strings.Trim(strings.TrimSpace(p), `"`))
			}
		}
		if m := userRe.FindStringSubmatch(line); m != nil {
			users[stage] = m[1]
		}
		targets[stage] = tg
	}
	for _, name := range []string{"policy", "roleset", "billing", "gateway"} {
		tg, ok := targets[name]
		require.True(t, ok, "Dockerfile has no target %q", name)
		require.Contains(t, tg.files, "/usr/local/bin/"+name, "target %s", name)
		require.Contains(t, tg.files, "/grpcprobe", "target %s", name)
		require.Equal(t, []string{"/usr/local/bin/" + name}, tg.entrypoint, "target %s", name)
		u, ok := users[name]
		require.True(t, ok, "target %s sets no USER", name)
		uid := strings.SplitN(u, ":", 2)[0]
		n, err := strconv.Atoi(uid)
		require.True(t, err == nil && n != 0, "target %s: USER %s must be a numeric non-root uid (runAsNonRoot checks it)", name, u)
	}
	return targets
}

func TestDockerfileBuildsEveryBinaryTheImagesCopy(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(deployRoot, "Dockerfile"))
	require.NoError(t, err)
	for name, pkg := range serviceCmds {
		require.Contains(t, string(src), pkg, "the build stage must build %s", name)
	}
	require.Contains(t, string(src), "./grpcprobe")
}
