package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

const (
	dashboardPath = "../deploy/grafana/cpsguard.json"
	alertsPath    = "../deploy/prometheus/alerts.yml"
)

var metricNameRe = regexp.MustCompile(`cpsguard_[a-z_]+`)

// queriedNames returns the metric families an expression queries: every
// cpsguard_ name, with the histogram suffixes stripped.
func queriedNames(exprs []string) []string {
	var out []string
	for _, e := range exprs {
		for _, n := range metricNameRe.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				n = strings.TrimSuffix(n, suffix)
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// dashboardExprs lists every query of the dashboard, by panel title.
func dashboardExprs(d dashboard) map[string][]string {
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			out["variable "+v.Name] = append(out["variable "+v.Name], v.Definition)
		}
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readAlerts(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	return rf
}

// Every metric a dashboard panel or an alert queries is one metrics.New
// exports, so a renamed metric cannot leave an empty panel or a silent alert.
func TestDashboardAndAlertsQueryExportedMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	touchAll(New(reg))
	exported := exportedNames(t, reg)

	var exprs []string
	for _, es := range dashboardExprs(readDashboard(t)) {
		exprs = append(exprs, es...)
	}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	queried := queriedNames(exprs)
	if len(queried) == 0 {
		t.Fatal("no cpsguard_ metric found in the dashboard and alerts")
	}
	for _, n := range queried {
		if !slices.Contains(exported, n) {
			t.Errorf("%s: queried by the dashboard or an alert, not exported by metrics.New (exported: %v)", n, exported)
		}
	}
}

// The dashboard shows what the operations issue asks for.
func TestDashboardCoversOperations(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard: uid %q title %q: want both set", d.UID, d.Title)
	}
	byPanel := dashboardExprs(d)
	var all []string
	for _, es := range byPanel {
		all = append(all, es...)
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{
		`cpsguard_admission_total{scope="peer",result="admitted"`,
		`cpsguard_admission_total{scope="customer",result=~"rejected|shadow_rejected"`,
		`cpsguard_limit_cps{scope="peer"`,
		`cpsguard_limit_cps{scope="customer"`,
		`cpsguard_limit_cps{scope="carrier"`,
		`histogram_quantile(0.50, sum by (carrier, le) (rate(cpsguard_pacing_wait_seconds_bucket`,
		`histogram_quantile(0.95, sum by (carrier, le) (rate(cpsguard_pacing_wait_seconds_bucket`,
		`histogram_quantile(0.99, sum by (carrier, le) (rate(cpsguard_pacing_wait_seconds_bucket`,
		`cpsguard_pacing_queued`,
		`cpsguard_reroutes_total`,
		`cpsguard_store_up`,
		`cpsguard_store_duration_seconds_bucket`,
		`cpsguard_config_reloads_total`,
		`cpsguard_carrier_up`,
		`cpsguard_carrier_effective_cps`,
		`cpsguard_carrier_responses_total`,
		`cpsguard_carrier_setup_seconds_bucket`,
		`cpsguard_active_calls{scope="peer"`,
		`cpsguard_active_calls{scope="customer"`,
		`cpsguard_active_calls{scope="carrier"`,
		`cpsguard_limit_calls{scope="carrier"`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("dashboard: no query contains %q", want)
		}
	}

	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panel %q: id %d also used by %q", p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" {
				if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q: no query", p.Title)
				}
				if p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("panel %q: gridPos %+v out of the 24-column grid", p.Title, p.GridPos)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}

// The alerts cover the failure modes operators must hear about and are
// well-formed; promtool checks them fully when it is installed.
func TestAlerts(t *testing.T) {
	rf := readAlerts(t)
	var names []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: rule %+v: want alert and expr", g.Name, r)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no summary annotation", r.Alert)
			}
		}
	}
	for _, want := range []string{
		"CpsguardStoreFallback", "CpsguardStoreDown", "CpsguardQueueDelayNearMaxWait",
		"CpsguardSustainedRejections", "CpsguardConfigReloadFailed", "CpsguardConfigDiffers", "CpsguardDuplicateNodeID",
		"CpsguardCarrierDown", "CpsguardCarrierPushingBack", "CpsguardCarrierOutOfService", "CpsguardCarrierASRTrips",
		"CpsguardOverloadShedding", "CpsguardMaxCallsRejections", "CpsguardPanics", "CpsguardStrangerFlood",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("alert %s: missing (have %v)", want, names)
		}
	}

	promtool := redistest.Require(t, "promtool") // Debian's prometheus
	if out, err := exec.Command(promtool, "check", "rules", alertsPath).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules %s: %v\n%s", alertsPath, err, out)
	}
}

// Every dashboard query is valid PromQL: promtool checks them as recording
// rules, with Grafana's variables replaced by plain values.
func TestDashboardPromQL(t *testing.T) {
	promtool := redistest.Require(t, "promtool") // Debian's prometheus
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$instance", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	i := 0
	for title, exprs := range dashboardExprs(readDashboard(t)) {
		if strings.HasPrefix(title, "variable ") {
			continue // label_values() is Grafana's, not PromQL
		}
		for _, e := range exprs {
			i++
			q, _ := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
			fmt.Fprintf(&b, "      - record: dashboard:q%d\n        expr: %s\n", i, q)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries: promtool: %v\n%s\n%s", err, out, b.String())
	}
}

// The dashboard follows Grafana's dashboard-linter rules that matter here
// (its module is not reachable from this build, so they are checked by
// hand): job and instance variables, and every cpsguard selector of every
// panel query matches them, so one Grafana shows one pool at a time; the
// per-peer rejected line counts every refusal of a peer's calls, its
// customer's limit included (cpsguard_calls_total by peer).
func TestDashboardLintRules(t *testing.T) {
	d := readDashboard(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, want := range []string{"datasource", "job", "instance", "peer", "customer", "carrier"} {
		if !vars[want] {
			t.Errorf("dashboard: no %q variable", want)
		}
	}
	sel := regexp.MustCompile(`cpsguard_[a-z_]+\{[^}]*\}`)
	for title, exprs := range dashboardExprs(d) {
		if strings.HasPrefix(title, "variable ") {
			continue
		}
		for _, e := range exprs {
			for _, s := range sel.FindAllString(e, -1) {
				if !strings.Contains(s, `job=~"$job"`) || !strings.Contains(s, `instance=~"$instance"`) {
					t.Errorf("panel %q: selector %s lacks the job or instance matcher", title, s)
				}
			}
			if strings.Contains(e, "rate(") && !strings.Contains(e, "$__rate_interval") {
				t.Errorf("panel %q: %s: rate() without $__rate_interval", title, e)
			}
		}
	}
	joined := strings.Join(dashboardExprs(d)["Peers: admitted vs rejected CPS"], "\n")
	if !strings.Contains(joined, `cpsguard_calls_total{outcome=~"rejected_.*"`) {
		t.Errorf("peer panel: the rejected line must count every refusal of the peer's calls (cpsguard_calls_total), got:\n%s", joined)
	}
}
