package deploy

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cpsguard/cpsguard/config"
)

// The manifests are decoded strictly into small structs (unknown fields are
// errors, so a misspelt hostNetwork fails here) instead of the Kubernetes
// API types, which would pull k8s.io modules into the root go.mod. kubectl
// cannot validate offline (it asks a server for the schema), but when it is
// installed `kubectl kustomize` checks the kustomization builds.

var update = flag.Bool("update", false, "rewrite kubernetes/prometheusrule.yaml from prometheus/alerts.yml")

const k8sDir = "kubernetes"

// decodeStrict decodes the single YAML document of path into v, failing on
// fields v does not know.
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var extra any
	if err := dec.Decode(&extra); err == nil {
		t.Fatalf("%s: more than one document", path)
	}
}

type typeMeta struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
}

type objectMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

func (m typeMeta) check(t *testing.T, file, apiVersion, kind string) {
	t.Helper()
	if m.APIVersion != apiVersion || m.Kind != kind {
		t.Errorf("%s: got %s %s, want %s %s", file, m.APIVersion, m.Kind, apiVersion, kind)
	}
	if m.Metadata.Name == "" {
		t.Errorf("%s: no metadata.name", file)
	}
	if m.Metadata.Labels[appLabel] != appName {
		t.Errorf("%s: labels %v: want %s: %s", file, m.Metadata.Labels, appLabel, appName)
	}
}

const appLabel, appName = "app.kubernetes.io/name", "cpsguard"

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional bool   `yaml:"optional"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
	Protocol      string `yaml:"protocol"`
}

type container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	ImagePullPolicy string          `yaml:"imagePullPolicy"`
	Env             []envVar        `yaml:"env"`
	Ports           []containerPort `yaml:"ports"`
	Lifecycle       struct {
		PreStop struct {
			Exec struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

// podTemplate is the pod template the DaemonSet and its Deployment variant
// share.
type podTemplate struct {
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		HostNetwork                   bool              `yaml:"hostNetwork"`
		EnableServiceLinks            *bool             `yaml:"enableServiceLinks"`
		DNSPolicy                     string            `yaml:"dnsPolicy"`
		TerminationGracePeriodSeconds int               `yaml:"terminationGracePeriodSeconds"`
		NodeSelector                  map[string]string `yaml:"nodeSelector"`
		Affinity                      struct {
			PodAntiAffinity struct {
				Required []struct {
					TopologyKey   string        `yaml:"topologyKey"`
					LabelSelector labelSelector `yaml:"labelSelector"`
				} `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
			} `yaml:"podAntiAffinity"`
		} `yaml:"affinity"`
		SecurityContext struct {
			RunAsNonRoot   bool `yaml:"runAsNonRoot"`
			RunAsUser      int  `yaml:"runAsUser"`
			RunAsGroup     int  `yaml:"runAsGroup"`
			SeccompProfile struct {
				Type string `yaml:"type"`
			} `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type rollingUpdate struct {
	Type          string `yaml:"type"`
	RollingUpdate struct {
		MaxSurge       int `yaml:"maxSurge"`
		MaxUnavailable int `yaml:"maxUnavailable"`
	} `yaml:"rollingUpdate"`
}

type deployment struct {
	typeMeta `yaml:",inline"`
	Spec     struct {
		Replicas int           `yaml:"replicas"`
		Selector labelSelector `yaml:"selector"`
		Strategy rollingUpdate `yaml:"strategy"`
		Template podTemplate   `yaml:"template"`
	} `yaml:"spec"`
}

type daemonSet struct {
	typeMeta `yaml:",inline"`
	Spec     struct {
		Selector       labelSelector `yaml:"selector"`
		UpdateStrategy rollingUpdate `yaml:"updateStrategy"`
		Template       podTemplate   `yaml:"template"`
	} `yaml:"spec"`
}

type podDisruptionBudget struct {
	typeMeta `yaml:",inline"`
	Spec     struct {
		MaxUnavailable int           `yaml:"maxUnavailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type namespace struct {
	typeMeta `yaml:",inline"`
}

type configMap struct {
	typeMeta `yaml:",inline"`
	Data     map[string]string `yaml:"data"`
}

type secret struct {
	typeMeta   `yaml:",inline"`
	Type       string            `yaml:"type"`
	StringData map[string]string `yaml:"stringData"`
}

type service struct {
	typeMeta `yaml:",inline"`
	Spec     struct {
		ClusterIP string            `yaml:"clusterIP"`
		Selector  map[string]string `yaml:"selector"`
		Ports     []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
			Protocol   string `yaml:"protocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type serviceMonitor struct {
	typeMeta `yaml:",inline"`
	Spec     struct {
		Selector  labelSelector `yaml:"selector"`
		Endpoints []struct {
			Port     string `yaml:"port"`
			Path     string `yaml:"path"`
			Interval string `yaml:"interval"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type alertGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type prometheusRule struct {
	typeMeta `yaml:",inline"`
	Spec     alertGroups `yaml:"spec"`
}

type kustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Namespace  string   `yaml:"namespace"`
	Resources  []string `yaml:"resources"`
	Images     []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// manifests holds every manifest of deploy/kubernetes, decoded.
type manifests struct {
	ds      daemonSet
	deploy  deployment
	pdb     podDisruptionBudget
	ns      namespace
	cm      configMap
	secret  secret
	svc     service
	monitor serviceMonitor
	rule    prometheusRule
}

func readManifests(t *testing.T) manifests {
	t.Helper()
	var m manifests
	decodeStrict(t, filepath.Join(k8sDir, "daemonset.yaml"), &m.ds)
	m.ds.check(t, "daemonset.yaml", "apps/v1", "DaemonSet")
	decodeStrict(t, filepath.Join(k8sDir, "deployment.yaml"), &m.deploy)
	m.deploy.check(t, "deployment.yaml", "apps/v1", "Deployment")
	decodeStrict(t, filepath.Join(k8sDir, "pdb.yaml"), &m.pdb)
	m.pdb.check(t, "pdb.yaml", "policy/v1", "PodDisruptionBudget")
	decodeStrict(t, filepath.Join(k8sDir, "namespace.yaml"), &m.ns)
	m.ns.check(t, "namespace.yaml", "v1", "Namespace")
	decodeStrict(t, filepath.Join(k8sDir, "configmap.yaml"), &m.cm)
	m.cm.check(t, "configmap.yaml", "v1", "ConfigMap")
	decodeStrict(t, filepath.Join(k8sDir, "secret.yaml"), &m.secret)
	m.secret.check(t, "secret.yaml", "v1", "Secret")
	decodeStrict(t, filepath.Join(k8sDir, "service.yaml"), &m.svc)
	m.svc.check(t, "service.yaml", "v1", "Service")
	decodeStrict(t, filepath.Join(k8sDir, "servicemonitor.yaml"), &m.monitor)
	m.monitor.check(t, "servicemonitor.yaml", "monitoring.coreos.com/v1", "ServiceMonitor")
	decodeStrict(t, filepath.Join(k8sDir, "prometheusrule.yaml"), &m.rule)
	m.rule.check(t, "prometheusrule.yaml", "monitoring.coreos.com/v1", "PrometheusRule")
	return m
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
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

// The DaemonSet (applied) and the Deployment (its variant) run one pod
// template, so the variant cannot drift.
func TestKubernetesWorkloads(t *testing.T) {
	m := readManifests(t)
	if !reflect.DeepEqual(m.ds.Spec.Template, m.deploy.Spec.Template) {
		t.Error("daemonset.yaml and deployment.yaml: pod templates differ; keep them one")
	}
	for name, sel := range map[string]labelSelector{"daemonset": m.ds.Spec.Selector, "deployment": m.deploy.Spec.Selector, "pdb": m.pdb.Spec.Selector} {
		if !subset(sel.MatchLabels, m.ds.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: selector %v does not select the pods' labels %v", name, sel.MatchLabels, m.ds.Spec.Template.Metadata.Labels)
		}
	}
	// The port is the node's: a rollout cannot surge.
	for name, s := range map[string]rollingUpdate{"daemonset": m.ds.Spec.UpdateStrategy, "deployment": m.deploy.Spec.Strategy} {
		if s.Type != "RollingUpdate" || s.RollingUpdate.MaxSurge != 0 || s.RollingUpdate.MaxUnavailable != 1 {
			t.Errorf("%s: rollout %+v; want RollingUpdate, maxSurge 0, maxUnavailable 1", name, s)
		}
	}
	// Voluntary evictions take one drained pod at a time.
	if m.pdb.Spec.MaxUnavailable != 1 {
		t.Errorf("pdb: maxUnavailable %d, want 1", m.pdb.Spec.MaxUnavailable)
	}
}

// hostNetwork needs the privileged Pod Security level, and the namespace
// the kustomization applies to says so; the manifests say why.
func TestKubernetesPodSecurity(t *testing.T) {
	m := readManifests(t)
	var k kustomization
	decodeStrict(t, filepath.Join(k8sDir, "kustomization.yaml"), &k)
	if m.ns.Metadata.Name != k.Namespace {
		t.Errorf("namespace.yaml names %q, kustomization applies to %q", m.ns.Metadata.Name, k.Namespace)
	}
	if got := m.ns.Metadata.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("namespace: pod-security.kubernetes.io/enforce %q, want privileged (hostNetwork)", got)
	}
	for _, f := range []string{"daemonset.yaml", "deployment.yaml", "namespace.yaml"} {
		b, err := os.ReadFile(filepath.Join(k8sDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"privileged" Pod Security level`)) {
			t.Errorf("%s: the comments do not say that hostNetwork needs the \"privileged\" Pod Security level", f)
		}
	}
}

// semverTag is a release tag vMAJOR.MINOR.PATCH (docs/releasing.md).
var semverTag = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// The pods run a released image, never latest, and drain before SIGTERM
// within the termination grace.
func TestKubernetesImageAndDrain(t *testing.T) {
	m := readManifests(t)
	pod := m.ds.Spec.Template.Spec
	c := pod.Containers[0]
	name, tag, ok := strings.Cut(c.Image, ":")
	if !ok || !semverTag.MatchString(tag) {
		t.Errorf("image %q: want a versioned tag vX.Y.Z (not latest, not untagged)", c.Image)
	}
	var k kustomization
	decodeStrict(t, filepath.Join(k8sDir, "kustomization.yaml"), &k)
	if len(k.Images) != 1 || k.Images[0].Name != name || !semverTag.MatchString(k.Images[0].NewTag) {
		t.Errorf("kustomization images %+v: want one entry for %s with a vX.Y.Z newTag", k.Images, name)
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) < 2 || cmd[0] != "/usr/local/bin/cpsguard" || cmd[1] != "drain" {
		t.Fatalf("preStop %q: want /usr/local/bin/cpsguard drain", cmd)
	}
	timeout := 60 * time.Second // cpsguard drain's default
	if i := slices.Index(cmd, "--timeout"); i >= 0 && i+1 < len(cmd) {
		d, err := time.ParseDuration(cmd[i+1])
		if err != nil {
			t.Fatalf("preStop --timeout %q: %v", cmd[i+1], err)
		}
		timeout = d
	}
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	cfg := loadConfigMap(t, m, "10.20.0.5")
	// The hook waits out the drain, and the kubelet's grace covers the hook
	// and the stop after it.
	if timeout < cfg.SIP.DrainGrace+time.Second || grace < timeout+5*time.Second {
		t.Errorf("preStop --timeout %s, terminationGracePeriodSeconds %s, sip.drain_grace %s: want drain_grace+1s <= timeout <= grace-5s",
			timeout, grace, cfg.SIP.DrainGrace)
	}
	// The drain command finds the node and its token in the pod's
	// environment; service links would add CPSGUARD_ variables cpsguard
	// does not know.
	var listen, token bool
	for _, e := range c.Env {
		listen = listen || e.Name == "CPSGUARD_HTTP_LISTEN"
		token = token || e.Name == "CPSGUARD_HTTP_TOKEN"
	}
	if !listen || !token {
		t.Errorf("env: CPSGUARD_HTTP_LISTEN %v, CPSGUARD_HTTP_TOKEN %v; the preStop drain needs both", listen, token)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks: want false (a Service named cpsguard would give the pod CPSGUARD_SERVICE_HOST & co.)")
	}
}

func TestKubernetesDeployment(t *testing.T) {
	m := readManifests(t)
	d := m.ds.Spec
	pod := d.Template.Spec
	// SIP peers are identified by source address: no SNAT in between.
	if !pod.HostNetwork || pod.DNSPolicy != "ClusterFirstWithHostNet" {
		t.Errorf("pod: hostNetwork %v, dnsPolicy %q; want true and ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}
	if len(pod.Affinity.PodAntiAffinity.Required) != 1 || pod.Affinity.PodAntiAffinity.Required[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("one pod per node (the SIP port is the node's): anti-affinity %+v", pod.Affinity.PodAntiAffinity)
	}
	if sc := pod.SecurityContext; !sc.RunAsNonRoot || sc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v: want non-root 65532, the image's USER", sc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("pod: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem ||
		!slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("container securityContext %+v: want no privilege escalation, read-only root, all capabilities dropped", sc)
	}
	for _, want := range []containerPort{{"sip-udp", 5060, "UDP"}, {"sip-tcp", 5060, "TCP"}, {"http", 9090, "TCP"}} {
		if !slices.Contains(c.Ports, want) {
			t.Errorf("container ports %+v: %+v missing", c.Ports, want)
		}
	}
	if p := c.ReadinessProbe.HTTPGet; p.Path != "/readyz" || p.Port != "http" {
		t.Errorf("readinessProbe %+v: want /readyz on port http", p)
	}
	if p := c.LivenessProbe.HTTPGet; p.Path != "/healthz" || p.Port != "http" {
		t.Errorf("livenessProbe %+v: want /healthz on port http", p)
	}
	// The image reads /etc/cpsguard/cpsguard.yaml: the ConfigMap's key there.
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/cpsguard" || !c.VolumeMounts[0].ReadOnly ||
		len(pod.Volumes) != 1 || pod.Volumes[0].Name != c.VolumeMounts[0].Name || pod.Volumes[0].ConfigMap.Name != m.cm.Metadata.Name {
		t.Errorf("config volume: mounts %+v, volumes %+v; want ConfigMap %s read-only at /etc/cpsguard", c.VolumeMounts, pod.Volumes, m.cm.Metadata.Name)
	}
	if _, ok := m.cm.Data["cpsguard.yaml"]; !ok {
		t.Errorf("configmap: no cpsguard.yaml key (keys %v)", slices.Collect(maps.Keys(m.cm.Data)))
	}
	// Every secret the pod reads is a key of the documented Secret.
	refs := 0
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		refs++
		ref := e.ValueFrom.SecretKeyRef
		if _, ok := m.secret.StringData[ref.Key]; !ok || ref.Name != m.secret.Metadata.Name {
			t.Errorf("env %s: secret %s key %s is not in secret.yaml (%s: %v)", e.Name, ref.Name, ref.Key, m.secret.Metadata.Name, m.secret.StringData)
		}
	}
	if refs == 0 {
		t.Error("env: no variable from the Secret")
	}
	for k, v := range m.secret.StringData {
		if v != "" {
			t.Errorf("secret.yaml: %s has a value: the file documents the keys and must carry no secret", k)
		}
	}
}

// The configuration in the ConfigMap is valid and warning-free with the
// environment the DaemonSet gives each pod.
func TestKubernetesConfigIsValid(t *testing.T) {
	m := readManifests(t)
	cfg := loadConfigMap(t, m, "10.20.0.5")
	if cfg.NodeID != "cpsguard-7d9f-abcde" || cfg.HTTP.Listen != "10.20.0.5:9090" || cfg.SIP.Advertise != "10.20.0.5" ||
		!slices.Equal(cfg.SIP.Listen, []string{"udp://10.20.0.5:5060", "tcp://10.20.0.5:5060"}) {
		t.Errorf("per-pod settings: node_id %q http.listen %q sip.advertise %q sip.listen %v", cfg.NodeID, cfg.HTTP.Listen, cfg.SIP.Advertise, cfg.SIP.Listen)
	}
	// On a node whose status.hostIP is IPv6, the same manifest.
	if v6 := loadConfigMap(t, m, "fd00:20::5"); v6.HTTP.Listen != "[fd00:20::5]:9090" || v6.SIP.Advertise != "fd00:20::5" ||
		!slices.Equal(v6.SIP.Listen, []string{"udp://[fd00:20::5]:5060", "tcp://[fd00:20::5]:5060"}) {
		t.Errorf("IPv6 node: http.listen %q sip.advertise %q sip.listen %v", v6.HTTP.Listen, v6.SIP.Advertise, v6.SIP.Listen)
	}
	if cfg.Store.Redis == nil || cfg.Store.Redis.MasterName == "" || len(cfg.Peers) != 2 || len(cfg.Carriers) != 3 {
		t.Errorf("production example: want Sentinel, two dialers and three carriers; got %s, %d peers, %d carriers", cfg.StoreMode(), len(cfg.Peers), len(cfg.Carriers))
	}
	if w := config.Warnings(cfg); len(w) != 0 {
		t.Errorf("configmap cpsguard.yaml: cpsguard check warns:\n%s", strings.Join(w, "\n"))
	}
}

// loadConfigMap loads the ConfigMap's cpsguard.yaml with the environment
// the DaemonSet gives a pod (what the kubelet fills in, then $(VAR)
// expansion in order), as the pod's cpsguard does.
func loadConfigMap(t *testing.T, m manifests, nodeIP string) *config.Config {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix+"_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	// What the kubelet would fill in, then $(VAR) expansion in order.
	vars := map[string]string{"POD_NAME": "cpsguard-7d9f-abcde", "NODE_IP": nodeIP}
	// With a Redis password, as the ConfigMap's Sentinel expects (the
	// key is optional: without it nothing crosses the network to warn of).
	secrets := map[string]string{"http-token": "token-0123456789", "dialog-secret": "0123456789abcdef0123", "redis-password": "redis-pw-0123"}
	ref := regexp.MustCompile(`\$\(([A-Z_][A-Z0-9_]*)\)`)
	for _, e := range m.ds.Spec.Template.Spec.Containers[0].Env {
		v := ref.ReplaceAllStringFunc(e.Value, func(s string) string { return vars[ref.FindStringSubmatch(s)[1]] })
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			v = secrets[e.ValueFrom.SecretKeyRef.Key]
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef != nil {
			vars[e.Name] = v
			if strings.HasPrefix(e.Name, config.EnvPrefix+"_") && v != "" {
				t.Setenv(e.Name, v)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "cpsguard.yaml")
	if err := os.WriteFile(path, []byte(m.cm.Data["cpsguard.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("configmap cpsguard.yaml with the pod's environment: %v", err)
	}
	return cfg
}

func TestKubernetesMonitoring(t *testing.T) {
	m := readManifests(t)
	pod := m.ds.Spec.Template
	// The Service's name is Prometheus's job label, which alerts.yml uses.
	if m.svc.Metadata.Name != "cpsguard" || m.svc.Spec.ClusterIP != "None" || !subset(m.svc.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("service: name %q clusterIP %q selector %v; want cpsguard, headless, selecting the pods %v",
			m.svc.Metadata.Name, m.svc.Spec.ClusterIP, m.svc.Spec.Selector, pod.Metadata.Labels)
	}
	if len(m.svc.Spec.Ports) != 1 || m.svc.Spec.Ports[0].Name != "http" || m.svc.Spec.Ports[0].TargetPort != "http" {
		t.Errorf("service ports %+v: want one named http targeting the pods' http port", m.svc.Spec.Ports)
	}
	if !subset(m.monitor.Spec.Selector.MatchLabels, m.svc.Metadata.Labels) || len(m.monitor.Spec.Endpoints) != 1 ||
		m.monitor.Spec.Endpoints[0].Port != "http" || m.monitor.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("servicemonitor %+v: want the service's http port, /metrics", m.monitor.Spec)
	}
}

// The PrometheusRule carries exactly the alerts of prometheus/alerts.yml.
func TestKubernetesPrometheusRuleMatchesAlerts(t *testing.T) {
	const rulePath = k8sDir + "/prometheusrule.yaml"
	if *update {
		b, err := os.ReadFile("prometheus/alerts.yml")
		if err != nil {
			t.Fatal(err)
		}
		_, groups, ok := strings.Cut(string(b), "\ngroups:\n")
		if !ok {
			t.Fatal("alerts.yml: no groups: line")
		}
		var out strings.Builder
		out.WriteString("# Generated from deploy/prometheus/alerts.yml; do not edit. Regenerate with\n" +
			"#   go test ./deploy/ -run PrometheusRule -update\n" +
			"# Your Prometheus's ruleSelector may ask for a label of its own (with\n" +
			"# kube-prometheus-stack, release: <its release name>): add it in a kustomize patch.\n" +
			"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: cpsguard\n  labels:\n" +
			"    app.kubernetes.io/name: cpsguard\nspec:\n  groups:\n")
		for _, line := range strings.SplitAfter(groups, "\n") {
			if strings.TrimSpace(line) == "" {
				out.WriteString(line)
				continue
			}
			out.WriteString("  " + line)
		}
		if err := os.WriteFile(rulePath, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want alertGroups
	decodeStrict(t, "prometheus/alerts.yml", &want)
	got := readManifests(t).rule.Spec
	if len(want.Groups) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("%s differs from prometheus/alerts.yml; regenerate it with: go test ./deploy/ -run PrometheusRule -update", rulePath)
	}
}

// The kustomization applies every manifest but the Secret template, and
// builds (kubectl kustomize) when kubectl is installed.
func TestKubernetesKustomization(t *testing.T) {
	var k kustomization
	decodeStrict(t, filepath.Join(k8sDir, "kustomization.yaml"), &k)
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		// Not applied: the kustomization itself, the Secret's template and
		// the Deployment variant of daemonset.yaml.
		if b := filepath.Base(f); b != "kustomization.yaml" && b != "secret.yaml" && b != "deployment.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if k.Kind != "Kustomization" || k.Namespace == "" || !slices.Equal(got, want) {
		t.Errorf("kustomization: kind %q namespace %q resources %v; want Kustomization, a namespace, %v", k.Kind, k.Namespace, got, want)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not on PATH: strict decoding only")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", k8sDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, out)
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "DaemonSet", "PodDisruptionBudget", "Service", "ServiceMonitor", "PrometheusRule"} {
		if !bytes.Contains(out, []byte(fmt.Sprintf("\nkind: %s\n", kind))) {
			t.Errorf("kubectl kustomize: no %s in its output", kind)
		}
	}
	// Every resource but the Namespace itself lands in it.
	if n := bytes.Count(out, []byte("\n  namespace: "+k.Namespace+"\n")); n != len(want)-1 {
		t.Errorf("kubectl kustomize: %d resources in namespace %s, want %d", n, k.Namespace, len(want)-1)
	}
	if !bytes.Contains(out, []byte("image: cpsguard:"+k.Images[0].NewTag+"\n")) {
		t.Errorf("kubectl kustomize: the pods do not run cpsguard:%s", k.Images[0].NewTag)
	}
}
