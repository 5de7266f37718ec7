package deploy

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
)

type composeFile struct {
	Services map[string]struct {
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Image       string            `yaml:"image"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		DependsOn   any               `yaml:"depends_on"`
	} `yaml:"services"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestCompose(t *testing.T) {
	var c composeFile
	readYAML(t, "docker-compose.yml", &c)

	for _, want := range []string{"redis", "cpsguard-1", "cpsguard-2", "prometheus", "grafana"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("service %s: missing", want)
		}
	}

	hostPorts := map[string]string{}
	nodeIDs := map[string]string{}
	for name, s := range c.Services {
		// Every file or directory the compose file mounts exists.
		for _, v := range s.Volumes {
			host, rest, ok := strings.Cut(v, ":")
			if !ok || !strings.HasPrefix(host, ".") {
				continue // a named volume
			}
			if _, err := os.Stat(host); err != nil {
				t.Errorf("%s: mounts %s: %v", name, host, err)
			}
			if strings.HasPrefix(rest, "/etc/cpsguard/") && !strings.HasSuffix(rest, ":ro") {
				t.Errorf("%s: configuration mount %q: want read-only (:ro)", name, v)
			}
		}
		for _, p := range s.Ports {
			spec, proto := p, "tcp"
			if cut, ok := strings.CutSuffix(p, "/udp"); ok {
				spec, proto = cut, "udp"
			}
			spec = strings.TrimSuffix(spec, "/tcp")
			parts := strings.Split(spec, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q: want 127.0.0.1:HOST:CONTAINER (loopback only)", name, p)
				continue
			}
			key := parts[1] + "/" + proto
			if other, dup := hostPorts[key]; dup {
				t.Errorf("%s: host port %s also published by %s", name, key, other)
			}
			hostPorts[key] = name
		}
		if !strings.HasPrefix(name, "cpsguard-") {
			continue
		}
		// The cpsguard nodes: built from the repository's Dockerfile, with
		// the shared config mounted where the image's ENTRYPOINT reads it.
		if s.Build == nil {
			t.Errorf("%s: no build section", name)
		} else if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("%s: Dockerfile: %v", name, err)
		}
		if !slices.Contains(s.Volumes, "./cpsguard-compose.yaml:/etc/cpsguard/cpsguard.yaml:ro") {
			t.Errorf("%s: volumes %v: want ./cpsguard-compose.yaml mounted at /etc/cpsguard/cpsguard.yaml", name, s.Volumes)
		}
		id := s.Environment["CPSGUARD_NODE_ID"]
		if id == "" {
			t.Errorf("%s: no CPSGUARD_NODE_ID", name)
		} else if other, dup := nodeIDs[id]; dup {
			t.Errorf("%s: node id %q also used by %s", name, id, other)
		}
		nodeIDs[id] = name
		if s.Environment["CPSGUARD_HTTP_TOKEN"] == "" {
			t.Errorf("%s: no CPSGUARD_HTTP_TOKEN: the API listens on the compose network", name)
		}
	}
	if len(nodeIDs) != 2 {
		t.Errorf("cpsguard nodes: got %d, want 2", len(nodeIDs))
	}
}

// The configuration the compose nodes run is valid and warning-free with
// the environment docker-compose.yml gives them, shares Redis and is
// reachable by Prometheus.
func TestComposeConfigIsValid(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix+"_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	t.Setenv("CPSGUARD_NODE_ID", "cpsguard-1")
	t.Setenv("CPSGUARD_SIP_ADVERTISE", "127.0.0.1:5060") // docker-compose.yml's default for node 1
	t.Setenv("CPSGUARD_HTTP_TOKEN", "change-me")
	t.Setenv("CPSGUARD_SIP_DIALOG_SECRET", "0123456789abcdef0123") // required by docker-compose.yml
	cfg, err := config.Load("cpsguard-compose.yaml")
	if err != nil {
		t.Fatalf("cpsguard-compose.yaml: %v", err)
	}
	// cpsguard check is quiet on the example it ships (it warned about
	// its placeholder carrier names and unknown_source: reject).
	if w := config.Warnings(cfg); len(w) != 0 {
		t.Errorf("cpsguard-compose.yaml with the nodes' environment: cpsguard check warns:\n%s", strings.Join(w, "\n"))
	}
	if cfg.Store.Redis == nil || !slices.Equal(cfg.Store.Redis.Addrs, []string{"redis:6379"}) {
		t.Errorf("store.redis: got %+v, want addrs [redis:6379] (the compose service)", cfg.Store.Redis)
	}
	if cfg.HTTP.Listen != "0.0.0.0:9090" {
		t.Errorf("http.listen: got %q, want 0.0.0.0:9090 (scraped over the compose network)", cfg.HTTP.Listen)
	}
	if cfg.NodeID != "cpsguard-1" || cfg.HTTP.Token != "change-me" {
		t.Errorf("environment overrides: got node_id %q token set %v", cfg.NodeID, cfg.HTTP.Token != "")
	}
}

func TestPrometheusScrapesComposeNodes(t *testing.T) {
	var p struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &p)
	var targets []string
	for _, sc := range p.ScrapeConfigs {
		if sc.JobName != "cpsguard" {
			continue
		}
		for _, s := range sc.StaticConfigs {
			targets = append(targets, s.Targets...)
		}
	}
	slices.Sort(targets)
	if want := []string{"cpsguard-1:9090", "cpsguard-2:9090"}; !slices.Equal(targets, want) {
		t.Errorf("job cpsguard targets: got %v, want %v", targets, want)
	}
	if !slices.Contains(p.RuleFiles, "/etc/prometheus/alerts.yml") {
		t.Errorf("rule_files %v: want /etc/prometheus/alerts.yml (mounted by docker-compose.yml)", p.RuleFiles)
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		Datasources []struct {
			Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasources: got %+v, want one prometheus at http://prometheus:9090", ds.Datasources)
	}
	var dash struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/cpsguard.yml", &dash)
	if len(dash.Providers) != 1 || dash.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Errorf("dashboard providers: got %+v, want one reading /var/lib/grafana/dashboards", dash.Providers)
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"CGO_ENABLED=0",
		"-trimpath",
		"./cmd/cpsguard",
		// The build arguments the docs' docker build commands pass.
		"ARG VERSION=",
		"-X main.version=${VERSION}",
		"ARG REVISION=",
		"-X main.commit=${REVISION}",
		"FROM gcr.io/distroless/static",
		"USER 65532:65532",
		"EXPOSE 5060/udp 5060/tcp 9090",
		`ENTRYPOINT ["/usr/local/bin/cpsguard", "serve", "--config", "/etc/cpsguard/cpsguard.yaml"]`,
		// Exec form: distroless has no /bin/sh for the shell form.
		`CMD ["/usr/local/bin/cpsguard", "probe", "--config", "/etc/cpsguard/cpsguard.yaml"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile: %q missing", want)
		}
	}
	if !regexp.MustCompile(`\nHEALTHCHECK [^\n]*\\\n\s+CMD \["/usr/local/bin/cpsguard", "probe"`).MatchString(df) {
		t.Errorf("Dockerfile: no HEALTHCHECK running cpsguard probe")
	}
	if n := strings.Count(df, "\nFROM "); n < 2 {
		t.Errorf("Dockerfile: got %d stages, want a multi-stage build", n)
	}
}

// unitKeys parses a systemd unit into section.key -> values.
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Errorf("%s: line %q: not key=value", path, line)
				continue
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

func TestSystemdUnit(t *testing.T) {
	u := unitKeys(t, "cpsguard.service")
	for key, want := range map[string]string{
		"Service.ExecStart":  "/usr/local/bin/cpsguard serve --config /etc/cpsguard/cpsguard.yaml",
		"Service.ExecReload": "/bin/kill -HUP $MAINPID",
		// Started means listening: cpsguard sends READY=1 once its SIP and
		// HTTP listeners are bound, STOPPING=1 when SIGTERM starts the drain.
		"Service.Type":            "notify",
		"Service.NotifyAccess":    "main",
		"Service.Restart":         "on-failure",
		"Service.DynamicUser":     "yes",
		"Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem":   "strict",
		// The one writable place, for records.file under ProtectSystem.
		"Service.LogsDirectory":         "cpsguard",
		"Service.ProtectHome":           "yes",
		"Service.PrivateTmp":            "yes",
		"Service.CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
		"Service.AmbientCapabilities":   "CAP_NET_BIND_SERVICE",
		"Install.WantedBy":              "multi-user.target",
	} {
		if got := u[key]; !slices.Contains(got, want) {
			t.Errorf("%s: got %q, want %q", key, got, want)
		}
	}
	// A memory ceiling: the node reads it from its cgroup and sets its Go
	// soft limit (GOMEMLIMIT) to 90 % of it.
	if got := u["Service.MemoryMax"]; len(got) != 1 || got[0] == "" || got[0] == "infinity" {
		t.Errorf("MemoryMax: got %q, want one finite limit", got)
	}
	// sd_notify needs a unix socket.
	if fams := strings.Join(u["Service.RestrictAddressFamilies"], " "); !strings.Contains(fams, "AF_UNIX") {
		t.Errorf("RestrictAddressFamilies %q: want AF_UNIX, for NOTIFY_SOCKET", fams)
	}
	// systemd's stop timeout covers the drain (sip.drain_grace, default
	// 5 s, plus a second of cancelled calls and the HTTP shutdown).
	if got := u["Service.TimeoutStopSec"]; len(got) != 1 {
		t.Errorf("TimeoutStopSec: got %q, want one", got)
	} else if d, err := time.ParseDuration(got[0]); err != nil || d < config.Default().SIP.DrainGrace+10*time.Second {
		t.Errorf("TimeoutStopSec %s: want at least sip.drain_grace (%s) + 10s", got[0], config.Default().SIP.DrainGrace)
	}
	// systemctl reload validates the file before signalling, like nginx:
	// the check comes first and names the file ExecStart serves.
	if got := u["Service.ExecReload"]; len(got) != 2 ||
		got[0] != "/usr/local/bin/cpsguard check --quiet --config /etc/cpsguard/cpsguard.yaml" || got[1] != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload: got %q, want cpsguard check of the served file, then kill -HUP", got)
	}
	if path, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify wants the ExecStart binary to exist: point it at /bin/true.
		b, _ := os.ReadFile("cpsguard.service")
		tmp := filepath.Join(t.TempDir(), "cpsguard.service")
		os.WriteFile(tmp, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/cpsguard", "/bin/true")), 0o644)
		out, err := exec.Command(path, "verify", tmp).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
}

// CGO_ENABLED=0 with -trimpath yields a static binary, as the Dockerfile's
// distroless/static stage needs.
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped under -short")
	}
	bin := filepath.Join(t.TempDir(), "cpsguard")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/cpsguard")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary has a program interpreter: dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v: want none", libs)
	}
}

// TestComposeShipsNoSecret: a compose file copied as it is never runs with
// a public secret: every secret variable is required (${VAR:?message}),
// never given a default (${VAR:-…} or ${VAR-…}) or a literal value.
func TestComposeShipsNoSecret(t *testing.T) {
	secret := regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSWORD)\s*[:=]\s*(.*)$`)
	required := regexp.MustCompile(`^\$\{[A-Z0-9_]+:\?[^}]+\}$`)
	for _, f := range []string{"docker-compose.yml", "cpsguard-compose.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "#") {
				continue
			}
			m := secret.FindStringSubmatch(line)
			if m == nil || strings.TrimSpace(m[2]) == "" {
				continue
			}
			if v := strings.Trim(strings.TrimSpace(m[2]), `"'`); !required.MatchString(v) {
				t.Errorf("%s:%d: secret set to %q, want ${VAR:?message} (required, no default)", f, i+1, v)
			}
		}
	}
}

// alertTests is what TestAlertRules reads of prometheus/alerts_test.yml.
type alertTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string           `yaml:"eval_time"`
			AlertName string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert of prometheus/alerts.yml has a unit test in which it fires
// and one evaluation in which it does not (not yet, or not for a series
// that must not fire it), and promtool runs them (Debian package
// prometheus): the alerts fire when they should and not before.
func TestAlertRules(t *testing.T) {
	var rules alertGroups
	decodeStrict(t, "prometheus/alerts.yml", &rules)
	var tests alertTests
	readYAML(t, "prometheus/alerts_test.yml", &tests)
	if !slices.Equal(tests.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("alerts_test.yml: rule_files %v, want [alerts.yml]", tests.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, e := range tc.AlertRuleTest {
			if len(e.ExpAlerts) > 0 {
				fires[e.AlertName] = true
			} else {
				quiet[e.AlertName] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !fires[r.Alert] {
				t.Errorf("alert %s: no unit test in prometheus/alerts_test.yml in which it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alert %s: no unit test in prometheus/alerts_test.yml in which it stays silent", r.Alert)
			}
		}
	}
	if n < 17 {
		t.Errorf("alerts.yml: %d alerts, want at least 17", n)
	}

	promtool := redistest.Require(t, "promtool") // Debian's prometheus
	out, err := exec.Command(promtool, "test", "rules", "prometheus/alerts_test.yml").CombinedOutput()
	if err != nil {
		t.Errorf("promtool test rules prometheus/alerts_test.yml: %v\n%s", err, out)
	}
}
