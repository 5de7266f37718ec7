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
		Expr         string `json:"expr"`
		RefID        string `json:"refId"`
		LegendFormat string `json:"legendFormat"`
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
	cells := map[[2]int]string{} // grid cell (x, y) → the panel over it
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panel %q: id %d also used by %q", p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			overlap := ""
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
					if other, taken := cells[[2]int{x, y}]; taken && overlap == "" {
						overlap = other
					}
					cells[[2]int{x, y}] = p.Title
				}
			}
			if overlap != "" {
				t.Errorf("panel %q: gridPos %+v overlaps panel %q", p.Title, p.GridPos, overlap)
			}
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
		"CpsguardPriorityCallsSustained", "CpsguardPriorityClaimRefused",
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

// familyLabels returns the label names of every family metrics.New
// exports, as the code declares them (a gather after touchAll, which gives
// every collector a series).
func familyLabels(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	touchAll(New(reg))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		labels := []string{}
		if ms := mf.GetMetric(); len(ms) > 0 {
			for _, lp := range ms[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		out[mf.GetName()] = labels
	}
	return out
}

// knownValues are the label values the code uses for each enum label of a
// family, from the lists in metrics.go; names (peer, customer, carrier,
// config_hash, …) come from the configuration and are not listed.
func knownValues() map[string]map[string][]string {
	limitScopes := []string{ScopePeer, ScopeCustomer, ScopeCarrier, ScopeDestination}
	return map[string]map[string][]string{
		"cpsguard_calls_total":             {"outcome": Outcomes},
		"cpsguard_admission_total":         {"scope": {ScopePeer, ScopeCustomer, ScopeDestination, ScopeRepeatDial}, "result": AdmissionResults},
		"cpsguard_limit_cps":               {"scope": limitScopes},
		"cpsguard_limit_calls":             {"scope": limitScopes},
		"cpsguard_active_calls":            {"scope": {ScopePeer, ScopeCustomer, ScopeCarrier}},
		"cpsguard_priority_calls_total":    {"kind": PriorityKinds},
		"cpsguard_pacing_total":            {"result": PacingResults},
		"cpsguard_reroutes_total":          {"reason": RerouteReasons},
		"cpsguard_carrier_responses_total": {"class": ResponseClasses},
		"cpsguard_carrier_seizures_total":  {"result": SeizureResults},
		"cpsguard_carrier_probes_total":    {"result": {ProbeOK, ProbeFailed}},
		"cpsguard_records_written_total":   {"sink": RecordSinks},
		"cpsguard_records_dropped_total":   {"sink": RecordSinks},
		"cpsguard_config_reloads_total":    {"result": ReloadResults},
		"cpsguard_sip_errors_total":        {"reason": SIPErrorReasons},
		"cpsguard_panics_total":            {"where": PanicPlaces},
		"cpsguard_store_errors_total":      {"script": StoreScripts},
		"cpsguard_store_duration_seconds":  {"script": StoreScripts},
	}
}

var (
	selectorRe = regexp.MustCompile(`\b(cpsguard_[a-z_]+)(\{[^}]*\})?`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	// label_replace(v, "dst", "replacement", "src", "regex"): its last four
	// arguments.
	labelReplaceRe = regexp.MustCompile(`"([a-zA-Z_]\w*)"\s*,\s*"[^"]*"\s*,\s*"([a-zA-Z_]\w*)"\s*,\s*"[^"]*"\s*\)`)
	labelValuesRe  = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_]\w*)\)$`)
	legendLabelRe  = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
)

// matcher is one label matcher of a selector.
type matcher struct{ label, op, value string }

// selector is one cpsguard metric selector of a query.
type selector struct {
	family string // the metric family, histogram suffixes stripped
	labels []string
	match  []matcher
}

// admits reports whether the selector's matchers on label admit value.
func (s selector) admits(label, value string) bool {
	for _, m := range s.match {
		if m.label != label {
			continue
		}
		re, err := regexp.Compile(`^(?:` + m.value + `)$`)
		ok := err == nil && re.MatchString(value)
		switch m.op {
		case "=":
			ok = m.value == value
		case "!=":
			ok = m.value != value
		case "!~":
			ok = !ok
		}
		if !ok {
			return false
		}
	}
	return true
}

// equal reports whether the selector picks label=value exactly.
func (s selector) equal(label, value string) bool {
	for _, m := range s.match {
		if m.label == label && m.op == "=" && m.value == value {
			return true
		}
	}
	return false
}

// selectors parses the cpsguard selectors of a query; a selector of a
// family the code does not export has no labels.
func selectors(e string, families map[string][]string) []selector {
	var out []selector
	for _, sm := range selectorRe.FindAllStringSubmatch(e, -1) {
		s := selector{family: sm[1]}
		labels, ok := families[s.family]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if ok {
				break
			}
			if base := strings.TrimSuffix(sm[1], suffix); base != sm[1] {
				if labels, ok = families[base]; ok {
					s.family = base
					if suffix == "_bucket" {
						labels = append(slices.Clone(labels), "le")
					}
				}
			}
		}
		// Prometheus adds the target's job and instance to every series.
		s.labels = append(slices.Clone(labels), "job", "instance")
		for _, mm := range matcherRe.FindAllStringSubmatch(sm[2], -1) {
			s.match = append(s.match, matcher{mm[1], mm[2], mm[3]})
		}
		out = append(out, s)
	}
	return out
}

// groupingLabels lists the labels of every by, without, on, ignoring and
// group_* clause of a query.
func groupingLabels(e string) []string {
	var out []string
	for _, gm := range groupingRe.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(gm[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// checkQuery reports every label of query e that none of its metrics has,
// and every enum value a matcher names that the code never uses. legend is
// the panel target's legendFormat ("" for none).
func checkQuery(e, legend string, families map[string][]string, known map[string]map[string][]string) []string {
	var problems []string
	sels := selectors(e, families)
	var all []string // every label the query's series can carry
	for _, s := range sels {
		all = append(all, s.labels...)
	}
	for _, lm := range labelReplaceRe.FindAllStringSubmatch(e, -1) {
		all = append(all, lm[1])
		if !slices.Contains(all, lm[2]) {
			problems = append(problems, fmt.Sprintf("label_replace reads label %q, which none of its metrics has", lm[2]))
		}
	}
	for _, s := range sels {
		if _, ok := families[s.family]; !ok {
			problems = append(problems, fmt.Sprintf("%s: not a metric metrics.New exports", s.family))
			continue
		}
		for _, m := range s.match {
			if !slices.Contains(s.labels, m.label) {
				problems = append(problems, fmt.Sprintf("%s has no label %q (its labels: %v)", s.family, m.label, s.labels))
				continue
			}
			values, enum := known[s.family][m.label]
			if !enum || strings.Contains(m.value, "$") {
				continue
			}
			// Each alternative of a regex a|b must match a value of its
			// own: "pause|late" would show late alone.
			alts := []string{m.value}
			if (m.op == "=~" || m.op == "!~") && !strings.ContainsAny(m.value, "()") {
				alts = strings.Split(m.value, "|")
			}
			for _, alt := range alts {
				pos := matcher{m.label, strings.Replace(strings.Replace(m.op, "!~", "=~", 1), "!=", "=", 1), alt}
				matches := false
				for _, v := range values {
					matches = matches || (selector{match: []matcher{pos}}).admits(m.label, v)
				}
				if !matches {
					problems = append(problems, fmt.Sprintf("%s{%s%s%q}: %q matches no value the code uses (values: %v)", s.family, m.label, m.op, m.value, alt, values))
				}
			}
		}
	}
	for _, l := range groupingLabels(e) {
		if !slices.Contains(all, l) {
			problems = append(problems, fmt.Sprintf("groups by label %q, which none of its metrics has", l))
		}
	}
	for _, lm := range legendLabelRe.FindAllStringSubmatch(legend, -1) {
		if !slices.Contains(all, lm[1]) {
			problems = append(problems, fmt.Sprintf("legend %q names label %q, which none of its metrics has", legend, lm[1]))
		}
	}
	return problems
}

// Every dashboard query and alert names only labels its metrics really
// have (as metrics.New declares them) and only label values the code
// uses: a panel on a renamed label, or on result="pause" for "paused",
// would read "No data" on a busy node, and promtool cannot tell.
func TestDashboardAndAlertsUseRealLabels(t *testing.T) {
	families := familyLabels(t)
	known := knownValues()
	for fam, labels := range known {
		for l := range labels {
			if !slices.Contains(families[fam], l) {
				t.Errorf("knownValues: %s has no label %q (its labels: %v)", fam, l, families[fam])
			}
		}
	}
	checked := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				checked++
				for _, pr := range checkQuery(tg.Expr, tg.LegendFormat, families, known) {
					t.Errorf("panel %q, query %s: %s", p.Title, tg.RefID, pr)
				}
			}
			walk(p.Panels)
		}
	}
	d := readDashboard(t)
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Definition == "" {
			continue
		}
		m := labelValuesRe.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		for _, pr := range checkQuery(m[1], "", families, known) {
			t.Errorf("variable %s: %s", v.Name, pr)
		}
		for _, s := range selectors(m[1], families) {
			if !slices.Contains(s.labels, m[2]) {
				t.Errorf("variable %s: %s has no label %q", v.Name, s.family, m[2])
			}
		}
	}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			checked++
			for _, pr := range checkQuery(r.Expr, "", families, known) {
				t.Errorf("alert %s: %s", r.Alert, pr)
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d queries, want every panel target and alert", checked)
	}
}

// The label check itself finds what it must: a made-up label, a made-up
// value, a grouping or legend label no metric has.
func TestCheckQueryFindsWrongLabels(t *testing.T) {
	families := familyLabels(t)
	known := knownValues()
	for _, tc := range []struct {
		name, expr, legend string
		wantProblem        bool
	}{
		{"real", `sum by (carrier, result) (rate(cpsguard_pacing_total{result=~"paused|late",job=~"$job"}[1m]))`, "{{carrier}} {{result}}", false},
		{"histogram le", `histogram_quantile(0.5, sum by (carrier, le) (rate(cpsguard_pacing_wait_seconds_bucket{carrier=~"$carrier"}[1m])))`, "{{carrier}}", false},
		{"label_replace", `max by (carrier) (label_replace(cpsguard_limit_cps{scope="carrier"}, "carrier", "$1", "name", "(.*)"))`, "{{carrier}}", false},
		{"no such label", `sum(cpsguard_pacing_total{peer="x"})`, "", true},
		{"no such value", `sum(cpsguard_pacing_total{result="pause"})`, "", true},
		{"regex matching nothing", `sum(cpsguard_calls_total{outcome=~"refused_.*"})`, "", true},
		{"regex alternative matching nothing", `sum(cpsguard_pacing_total{result=~"pause|late"})`, "", true},
		{"negative regex", `sum(cpsguard_calls_total{outcome!~"forwarded|canceled"})`, "", false},
		{"negated value not used", `sum(cpsguard_calls_total{outcome!="admitted"})`, "", true},
		{"grouping label", `sum by (reason) (cpsguard_pacing_total)`, "", true},
		{"legend label", `sum by (carrier) (cpsguard_pacing_total)`, "{{peer}}", true},
		{"label_replace source", `label_replace(cpsguard_pacing_queued, "name", "$1", "scope", "(.*)")`, "", true},
		{"unknown metric", `cpsguard_pacing_paused_total`, "", true},
	} {
		got := checkQuery(tc.expr, tc.legend, families, known)
		if (len(got) > 0) != tc.wantProblem {
			t.Errorf("%s: %s: got problems %q, want a problem: %v", tc.name, tc.expr, got, tc.wantProblem)
		}
	}
}

// Every metric family metrics.New exports has a panel (a variable alone
// does not count), and the values an operator must tell apart each have a
// line of their own: every outcome of a call, every pacing result (paused:
// a carrier's Retry-After), every kind of priority call (refused_claim: a
// peer claiming priority it may not), every seizure result, reroute reason
// and record sink. A metric added without a panel fails here.
func TestDashboardShowsEveryMetric(t *testing.T) {
	families := familyLabels(t)
	type panelSelector struct {
		sel      selector
		grouping []string // the labels its query groups by
	}
	var sels []panelSelector
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				g := groupingLabels(tg.Expr)
				for _, s := range selectors(tg.Expr, families) {
					sels = append(sels, panelSelector{s, g})
				}
			}
			walk(p.Panels)
		}
	}
	walk(readDashboard(t).Panels)
	for fam := range families {
		found := false
		for _, s := range sels {
			found = found || s.sel.family == fam
		}
		if !found {
			t.Errorf("%s: no dashboard panel queries it", fam)
		}
	}
	known := knownValues()
	for _, fl := range [][2]string{
		{"cpsguard_calls_total", "outcome"},
		{"cpsguard_pacing_total", "result"},
		{"cpsguard_priority_calls_total", "kind"},
		{"cpsguard_carrier_seizures_total", "result"},
		{"cpsguard_reroutes_total", "reason"},
		{"cpsguard_records_written_total", "sink"},
		{"cpsguard_records_dropped_total", "sink"},
	} {
		for _, v := range known[fl[0]][fl[1]] {
			shown := false
			for _, s := range sels {
				if s.sel.family == fl[0] && s.sel.admits(fl[1], v) &&
					(s.sel.equal(fl[1], v) || slices.Contains(s.grouping, fl[1])) {
					shown = true
				}
			}
			if !shown {
				t.Errorf("%s{%s=%q}: no panel shows it on a line of its own (grouped by %s, or selected alone)", fl[0], fl[1], v, fl[1])
			}
		}
	}
}
