package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/metrics"
)

// docFiles are the pages TestDocs reads: the README and every docs/ page.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(pages) < 8 {
		t.Fatalf("docs/*.md: %v (%d pages)", err, len(pages))
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, pages...)
}

func rel(path string) string {
	r, err := filepath.Rel(repoRoot, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// docCommand is one command a page shows: every line of an sh block, and
// every "$ " line of any block.
type docCommand struct {
	where string // file:line
	cmd   string
}

func docCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	var out []docCommand
	for _, f := range fencedBlocks(t, path) {
		switch f.lang {
		case "sh", "bash", "shell":
			for _, c := range commandLines(f.lines) {
				out = append(out, docCommand{fmt.Sprintf("%s:%d", rel(path), f.line), strings.TrimPrefix(c, "$ ")})
			}
		default:
			for _, l := range f.lines {
				if c, ok := strings.CutPrefix(l, "$ "); ok {
					out = append(out, docCommand{fmt.Sprintf("%s:%d", rel(path), f.line), c})
				}
			}
		}
	}
	return out
}

// exercised names, for every command the pages show that TestDocs does not
// run itself, where it is exercised: the test that runs it (a name
// starting with Test, which must exist), or the script that runs it, or —
// for the commands that change a machine or a registry (install, systemctl,
// docker, kubectl, git push), which no test may run — the test that checks
// everything they use (marked "checks"). An entry no page uses any more is
// an error, so the list stays the pages' list.
var exercised = []struct{ cmd, by string }{
	// README: the quick start and the walkthrough.
	{"go run ./cmd/cpsguard serve --config testdata/cpsguard.yaml", "TestWalkthrough"},
	{"make test", ".ci/run"},
	{"sipp -sf testdata/sipp/uas.xml -i 127.0.0.1 -p 5070", "TestWalkthrough"},
	{"sipp -sf testdata/sipp/uas.xml -t t1 -i 127.0.0.1 -p 5071", "TestWalkthrough"},
	{"sipp -sf testdata/sipp/uac.xml -i 127.0.0.1 -s 100 -r 30 -m 150 127.0.0.1:5060", "TestWalkthrough"},
	{"go run ./cmd/cpsguard status --config testdata/cpsguard.yaml", "TestWalkthrough"},
	{"curl -s 127.0.0.1:9060/metrics | grep -E '^cpsguard_(calls|admission|pacing|reroutes)_total'", "TestWalkthrough"},
	// docs/api.md
	{"cpsguard status --config testdata/cpsguard.yaml", "TestProbeAndStatusFindTheNode"},
	{"cpsguard limit set peer dialer-1 --cps 20 --ttl 1h", "TestLimitCommand"},
	{"cpsguard limit ls", "TestLimitCommand"},
	{"cpsguard limit rm peer dialer-1", "TestLimitCommand"},
	{`curl -s -X PUT -H "Authorization: Bearer $CPSGUARD_HTTP_TOKEN" -d '{"cps": 5, "ttl": "30m"}' http://127.0.0.1:9060/api/v1/limits/carrier/carrier-a`, "TestLimitsRoundTrip"},
	{`curl -s -X PUT -H "Authorization: Bearer $CPSGUARD_HTTP_TOKEN" -d '{"cps": 0, "ttl": "90d"}' http://127.0.0.1:9060/api/v1/limits/peer/dialer-1`, "TestLimitsValidation"},
	{"cpsguard probe --config testdata/cpsguard.yaml", "TestProbeAndStatusFindTheNode"},
	{"cpsguard drain --config testdata/cpsguard.yaml --timeout 20s", "TestServeNotifiesAndDrains"},
	{`curl -s -X POST -H "Authorization: Bearer $CPSGUARD_HTTP_TOKEN" http://127.0.0.1:9060/api/v1/reload`, "TestReload"},
	{"cpsguard calls", "TestCallsCommand"},
	{"cpsguard calls end CALL_ID", "TestCallsCommand"},
	{"cpsguard calls end 68681c97-ded0-40bf-a53d-daaa9a19116d", "TestCallsCommand"},
	{"cpsguard carrier unpause carrier-a", "TestCarrierUnpauseCommand"},
	{"cpsguard carrier out carrier-a --reason 'maintenance window'", "TestCarrierOutInCommand"},
	{"cpsguard carrier in carrier-a", "TestCarrierOutInCommand"},
	{"cpsguard status", "TestCarrierOutInCommand"},
	{`curl -s -X PUT -H "Authorization: Bearer $CPSGUARD_HTTP_TOKEN" -d '{"reason": "maintenance window"}' http://127.0.0.1:9060/api/v1/carriers/carrier-a/service`, "TestCarrierServiceAPI"},
	{`curl -s -X DELETE -H "Authorization: Bearer $CPSGUARD_HTTP_TOKEN" http://127.0.0.1:9060/api/v1/carriers/carrier-a/service`, "TestCarrierServiceAPI"},
	// docs/configuration.md (an example path: the command's form)
	{"cpsguard check --config cpsguard.yaml", "TestCheckExitCodes"},
	// docs/metrics.md
	{"scripts/dashboard-screenshot.sh", "scripts/dashboard-screenshot.sh"},
	// docs/operations.md
	{"make build && install -m 0755 bin/cpsguard /usr/local/bin/", "checks TestStaticBuild"},
	{"install -D -m 0644 cpsguard.yaml /etc/cpsguard/cpsguard.yaml", "checks TestSystemdUnit"},
	{`printf 'CPSGUARD_HTTP_TOKEN=%s\nCPSGUARD_SIP_DIALOG_SECRET=%s\n' "$(openssl rand -hex 16)" "$(openssl rand -hex 16)" > /etc/cpsguard/cpsguard.env && chmod 600 /etc/cpsguard/cpsguard.env`, "checks TestSystemdUnit"},
	{"install -m 0644 deploy/cpsguard.service /etc/systemd/system/ && systemctl daemon-reload && systemctl enable --now cpsguard", "checks TestSystemdUnit"},
	{"docker build -t cpsguard --build-arg VERSION=$(scripts/version.sh) --build-arg REVISION=$(git rev-parse HEAD) .", "checks TestDockerfile"},
	{"docker run --rm -v $PWD/cpsguard.yaml:/etc/cpsguard/cpsguard.yaml:ro -p 5060:5060/udp -p 5060:5060/tcp -p 127.0.0.1:9090:9090 cpsguard", "checks TestDockerfile"},
	{"cd deploy && CPSGUARD_HTTP_TOKEN=$(openssl rand -hex 16) CPSGUARD_SIP_DIALOG_SECRET=$(openssl rand -hex 16) docker compose up --build", "checks TestCompose"},
	{"cpsguard status --addr http://127.0.0.1:9091", "TestProbeAndStatusFindTheNode"},
	// docs/kubernetes.md
	{"kubectl apply -f deploy/kubernetes/namespace.yaml", "checks TestKubernetesPodSecurity"},
	{"kubectl label node NODE cpsguard.io/sip-edge=true", "checks TestKubernetesWorkloads"},
	{"kubectl -n cpsguard create secret generic cpsguard --from-literal=http-token=$(openssl rand -hex 16) --from-literal=dialog-secret=$(openssl rand -hex 16) --from-literal=redis-password=...", "checks TestKubernetesWorkloads"},
	{"kubectl apply -k deploy/kubernetes/", "checks TestKubernetesKustomization"},
	// docs/releasing.md
	{"git tag -a vX.Y.Z -m \"cpsguard vX.Y.Z\"", "TestVersionScript"},
	{"git push origin vX.Y.Z", "checks TestVersionScript"},
	{`docker build --build-arg VERSION="$(scripts/version.sh)" --build-arg REVISION="$(git rev-parse HEAD)" -t REGISTRY/cpsguard:vX.Y.Z .`, "checks TestDockerfile"},
	{"docker push REGISTRY/cpsguard:vX.Y.Z", "checks TestKubernetesImageAndDrain"},
}

// testFuncs returns the names of every Test function of the module.
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	out := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != repoRoot {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cpsguardHelp returns `cpsguard <sub> -h`'s output (its flags).
func cpsguardHelp(t *testing.T, sub string) string {
	t.Helper()
	out, _ := exec.Command(binary(t), sub, "-h").CombinedOutput()
	return string(out)
}

// Every command the README and docs/ show is run: by TestDocs itself when
// it is cheap (cpsguard check on a file of the repository, cpsguard
// version, promtool on the alerts), else by the test or script listed in
// exercised. Every `cpsguard <subcommand>` is one the CLI has, with flags
// its -h lists.
func TestDocsCommands(t *testing.T) {
	tests := testFuncs(t)
	used := map[string]bool{}
	helps := map[string]string{}
	flagRe := regexp.MustCompile(`(^|\s)(--?[a-z][a-z-]*)`)
	n := 0
	for _, page := range docFiles(t) {
		for _, c := range docCommands(t, page) {
			n++
			cmd := c.cmd
			if rest, ok := strings.CutPrefix(cmd, "go run ./cmd/cpsguard "); ok {
				cmd = "cpsguard " + rest
			}
			if rest, ok := strings.CutPrefix(cmd, "cpsguard "); ok {
				f := strings.Fields(rest)
				sub := f[0]
				switch {
				case sub == "--version":
				case commands[sub].run == nil:
					t.Errorf("%s: %q: cpsguard has no command %q", c.where, c.cmd, sub)
					continue
				default:
					if helps[sub] == "" {
						helps[sub] = cpsguardHelp(t, sub)
					}
					for _, m := range flagRe.FindAllStringSubmatch(rest, -1) {
						name := strings.TrimLeft(m[2], "-")
						if !strings.Contains(helps[sub], "-"+name) {
							t.Errorf("%s: %q: cpsguard %s has no flag --%s", c.where, c.cmd, sub, name)
						}
					}
				}
				if ran := runCheap(t, f); ran {
					continue
				}
			}
			if strings.HasPrefix(cmd, "promtool ") {
				runPromtool(t, c)
				continue
			}
			i := slices.IndexFunc(exercised, func(e struct{ cmd, by string }) bool { return e.cmd == c.cmd })
			if i < 0 {
				t.Errorf("%s: %q: neither run by TestDocs nor listed in exercised with the test that runs it", c.where, c.cmd)
				continue
			}
			used[c.cmd] = true
		}
	}
	if n < 30 {
		t.Errorf("found %d commands in the pages; the extraction is broken", n)
	}
	for _, e := range exercised {
		if !used[e.cmd] {
			t.Errorf("exercised: %q is on no page any more: remove it", e.cmd)
		}
		by := strings.TrimPrefix(e.by, "checks ")
		switch {
		case strings.HasPrefix(by, "Test"):
			if !tests[by] {
				t.Errorf("exercised: %q: no test %s in the module", e.cmd, by)
			}
		default:
			st, err := os.Stat(filepath.Join(repoRoot, by))
			if err != nil || st.Mode()&0o111 == 0 {
				t.Errorf("exercised: %q: %s is not an executable script (%v)", e.cmd, by, err)
			}
		}
	}
}

// runCheap runs the cpsguard commands TestDocs runs itself (fields after
// "cpsguard") and reports whether it did.
func runCheap(t *testing.T, f []string) bool {
	t.Helper()
	switch {
	case len(f) == 1 && (f[0] == "version" || f[0] == "--version"):
	case f[0] == "check" && len(f) == 3 && f[1] == "--config":
		if _, err := os.Stat(filepath.Join(repoRoot, f[2])); err != nil {
			return false // an example path: listed in exercised
		}
		f = []string{"check", "--config", filepath.Join(repoRoot, f[2])}
	default:
		return false
	}
	if r := cpsguard(t, nil, f...); r.code != 0 {
		t.Errorf("cpsguard %s: exit %d\n%s%s", strings.Join(f, " "), r.code, r.stdout, r.stderr)
	}
	return true
}

func runPromtool(t *testing.T, c docCommand) {
	t.Helper()
	promtool := redistest.Require(t, "promtool")
	f := strings.Fields(c.cmd)
	cmd := exec.Command(promtool, f[1:]...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: %s: %v\n%s", c.where, c.cmd, err, out)
	}
}

// configKeys returns every key of docs/configuration.md's generated
// tables (kept equal to the schema by config's TestConfigurationReference).
func configKeys(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, gen, ok := strings.Cut(string(b), "<!-- BEGIN GENERATED")
	if !ok {
		t.Fatal("docs/configuration.md: no generated section")
	}
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(gen, -1) {
		keys[m[1]] = true
	}
	if len(keys) < 80 {
		t.Fatalf("docs/configuration.md: %d keys, want the whole schema", len(keys))
	}
	return keys
}

var (
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	keyPrefix  = regexp.MustCompile(`^(?:node_id|shadow|customer_header|(?:sip|store|http|log|peers|customers|carriers|routes)(?:\[\d*\])?(?:\.[a-z_]+(?:\[\d*\])?)*)`)
	indexRe    = regexp.MustCompile(`\[\d*\]`)
)

// normKey writes a key as the reference does: list items as [], a route
// name as <name>.
func normKey(k string) string {
	k = indexRe.ReplaceAllString(k, "[]")
	if strings.HasPrefix(k, "routes.") {
		return "routes.<name>"
	}
	return k
}

// proseOnly blanks the fenced blocks of a page, keeping its line count.
func proseOnly(text string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			b.WriteString("\n")
			continue
		}
		if !in {
			b.WriteString(l)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// yamlKeys walks a YAML node and calls f with every key path.
func yamlKeys(n *yaml.Node, path string, f func(string)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			yamlKeys(c, path, f)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			yamlKeys(c, path+"[]", f)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			p := k
			if path != "" {
				p = path + "." + k
			}
			if path == "routes" {
				f("routes.<name>")
				continue // a route's value is carriers or a policy block
			}
			f(p)
			yamlKeys(n.Content[i+1], p, f)
		}
	}
}

// Every configuration key the pages name — in inline code or as a key of
// a yaml block — exists in the schema; a yaml block that is a whole
// configuration (peers, carriers and routes) loads; every CPSGUARD_
// variable named is one the configuration reads.
func TestDocsConfigKeys(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix+"_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	keys := configKeys(t)
	env := map[string]bool{}
	for _, v := range append(config.EnvVars(), config.ToolEnvVars...) {
		env[v] = true
	}
	// Variables the pages name on purpose although they set nothing: the
	// typo configuration.md shows being refused, and the service links
	// Kubernetes gives a pod (allowed, see config.unknownEnv).
	examples := map[string]bool{"CPSGUARD_HTTP_LISTN": true, "CPSGUARD_SERVICE_HOST": true, "CPSGUARD_PORT_9090_TCP_ADDR": true}
	envRe := regexp.MustCompile(`CPSGUARD_[A-Z0-9_]*[A-Z0-9]\b\*?`)
	fullConfigs := 0
	for _, page := range docFiles(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(proseOnly(string(b)), "\n") {
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				k := keyPrefix.FindString(m[1])
				if k == "" || (!strings.ContainsAny(k, ".[") && !slices.Contains([]string{"node_id", "shadow", "customer_header"}, k)) {
					continue
				}
				if slices.Contains(metrics.PanicPlaces, k) {
					continue // sip.invite: a place of cpsguard_panics_total, not a key
				}
				if !keys[normKey(k)] && !keys[k] {
					t.Errorf("%s:%d: `%s`: %s is not a configuration key", rel(page), i+1, m[1], normKey(k))
				}
			}
		}
		for _, m := range envRe.FindAllString(string(b), -1) {
			if strings.HasSuffix(m, "*") || strings.HasSuffix(m, "_") || env[m] || examples[m] {
				continue // CPSGUARD_STORE_REDIS_*: a family
			}
			t.Errorf("%s: %s is no CPSGUARD_ variable the configuration reads", rel(page), m)
		}
		for _, f := range fencedBlocks(t, page) {
			if f.lang != "yaml" {
				continue
			}
			src := strings.Join(f.raw, "\n")
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
				t.Errorf("%s:%d: yaml block: %v", rel(page), f.line, err)
				continue
			}
			top := map[string]bool{}
			yamlKeys(&doc, "", func(p string) {
				if !keys[normKey(p)] {
					t.Errorf("%s:%d: yaml block: %s is not a configuration key", rel(page), f.line, p)
				}
				if !strings.ContainsAny(p, ".[") {
					top[p] = true
				}
			})
			if top["peers"] && top["carriers"] && top["routes"] {
				fullConfigs++
				if _, err := config.Parse([]byte(src)); err != nil {
					t.Errorf("%s:%d: a whole configuration that does not load:\n%v", rel(page), f.line, err)
				}
			}
		}
	}
	if fullConfigs == 0 {
		t.Error("no page shows a whole configuration (the README's ten lines)")
	}
}

// Every metric the pages name is one cpsguard registers; every value they
// give an enum label is one the code uses; docs/metrics.md's tables of
// outcomes and SIP error reasons list exactly the code's values.
func TestDocsMetrics(t *testing.T) {
	families := map[string]bool{}
	for _, n := range registeredFamilies(t) {
		families[n] = true
	}
	labelValues := map[string][]string{
		"cpsguard_calls_total/outcome":         metrics.Outcomes,
		"cpsguard_sip_errors_total/reason":     metrics.SIPErrorReasons,
		"cpsguard_admission_total/result":      metrics.AdmissionResults,
		"cpsguard_pacing_total/result":         metrics.PacingResults,
		"cpsguard_reroutes_total/reason":       metrics.RerouteReasons,
		"cpsguard_config_reloads_total/result": metrics.ReloadResults,
		"cpsguard_panics_total/where":          metrics.PanicPlaces,
		"cpsguard_store_errors_total/script":   metrics.StoreScripts,
	}
	nameRe := regexp.MustCompile(`\bcpsguard_[a-z_]+[a-z]`)
	selRe := regexp.MustCompile(`\b(cpsguard_[a-z_]+)\{([^}]*)\}`)
	pairRe := regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	for _, page := range docFiles(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, n := range nameRe.FindAllString(text, -1) {
			base := n
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, s)
			}
			if !families[base] {
				t.Errorf("%s: %s is not a registered metric", rel(page), n)
			}
		}
		for _, m := range selRe.FindAllStringSubmatch(text, -1) {
			for _, p := range pairRe.FindAllStringSubmatch(m[2], -1) {
				if vals, ok := labelValues[m[1]+"/"+p[1]]; ok && !slices.Contains(vals, p[2]) {
					t.Errorf("%s: %s{%s=%q}: not a value the code uses (%v)", rel(page), m[1], p[1], p[2], vals)
				}
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		section string
		want    []string
	}{
		{"## Calls and admission", metrics.Outcomes},
		{"## SIP errors by reason", metrics.SIPErrorReasons},
	} {
		_, sec, ok := strings.Cut(string(b), "\n"+tc.section+"\n")
		if !ok {
			t.Fatalf("docs/metrics.md: no section %q", tc.section)
		}
		if i := strings.Index(sec, "\n## "); i >= 0 {
			sec = sec[:i]
		}
		var got []string
		for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(sec, -1) {
			if !strings.HasPrefix(m[1], "cpsguard_") {
				got = append(got, m[1])
			}
		}
		if !slices.Equal(sortedCopy(got), sortedCopy(tc.want)) {
			t.Errorf("docs/metrics.md %s: the table lists %v, the code %v", tc.section, got, tc.want)
		}
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(proseOnly(string(b)), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(strings.ReplaceAll(h, "`", ""))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Every relative link and image of the pages points at a file of the
// repository, and every #anchor at a heading of its page.
func TestDocsLinks(t *testing.T) {
	linkRe := regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	checked := 0
	for _, page := range docFiles(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(proseOnly(string(b)), "\n") {
			for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %s: %v", rel(page), i+1, target, err)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
					t.Errorf("%s:%d: link %s: no heading #%s in %s", rel(page), i+1, target, anchor, rel(path))
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links; the extraction is broken", checked)
	}
}

// Every docs/ page but the generated reference opens with a Contents list
// that links every ## section of the page, in order; every section of
// security.md says what its bound is, what it costs and how to see it;
// every alert the pages name exists, and metrics.md's table lists them all.
func TestDocsStructure(t *testing.T) {
	pages, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	for _, page := range pages {
		if filepath.Base(page) == "configuration.md" {
			continue
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := proseOnly(string(b))
		var sections []string
		for _, l := range strings.Split(text, "\n") {
			if h, ok := strings.CutPrefix(l, "## "); ok && h != "Contents" {
				sections = append(sections, slug(strings.ReplaceAll(h, "`", "")))
			}
		}
		_, contents, ok := strings.Cut(text, "\n## Contents\n")
		if !ok {
			t.Errorf("%s: no ## Contents", rel(page))
			continue
		}
		if i := strings.Index(contents, "\n## "); i >= 0 {
			contents = contents[:i]
		}
		var listed []string
		for _, m := range regexp.MustCompile(`(?m)^- \[[^\]]+\]\(#([^)]+)\)`).FindAllStringSubmatch(contents, -1) {
			listed = append(listed, m[1])
		}
		if !slices.Equal(listed, sections) {
			t.Errorf("%s: Contents lists %v, the page's sections are %v", rel(page), listed, sections)
		}
		if filepath.Base(page) == "security.md" {
			for _, sec := range strings.Split(text, "\n## ")[1:] {
				title, body, _ := strings.Cut(sec, "\n")
				if title == "Contents" {
					continue
				}
				for _, want := range []string{"**What it is.**", "**What it costs.**", "**See it.**"} {
					if !strings.Contains(body, want) {
						t.Errorf("docs/security.md, %s: no %s paragraph", title, want)
					}
				}
			}
		}
	}

	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(b), -1) {
		alerts = append(alerts, m[1])
	}
	alertRe := regexp.MustCompile(`\bCpsguard[A-Z][A-Za-z]+`)
	for _, page := range docFiles(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range alertRe.FindAllString(string(b), -1) {
			if !slices.Contains(alerts, a) {
				t.Errorf("%s: alert %s is not in deploy/prometheus/alerts.yml", rel(page), a)
			}
		}
		if filepath.Base(page) == "metrics.md" {
			for _, a := range alerts {
				if !strings.Contains(string(b), "| `"+a+"` |") {
					t.Errorf("docs/metrics.md: the alerts table has no row for %s", a)
				}
			}
		}
	}
}

// The README keeps the two commands a newcomer runs first, in its first
// section: the proxy on the example configuration, and make test.
func TestDocsReadmeQuickStart(t *testing.T) {
	var first []string
	for _, c := range docCommands(t, filepath.Join(repoRoot, "README.md")) {
		first = append(first, c.cmd)
		if len(first) == 2 {
			break
		}
	}
	want := []string{"go run ./cmd/cpsguard serve --config testdata/cpsguard.yaml", "make test"}
	if !slices.Equal(first, want) {
		t.Errorf("README: the first commands are %q, want %q", first, want)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(b))); n > 2000 {
		t.Errorf("README: %d words; the reference belongs in docs/", n)
	}
}

// Every line of a promql block of the pages is a query promtool accepts
// (checked as a recording rule), and names only registered metrics
// (TestDocsMetrics).
func TestDocsPromQL(t *testing.T) {
	var b strings.Builder
	b.WriteString("groups:\n  - name: docs\n    rules:\n")
	n := 0
	for _, page := range docFiles(t) {
		for _, f := range fencedBlocks(t, page) {
			if f.lang != "promql" {
				continue
			}
			for _, q := range f.lines {
				if q == "" {
					continue
				}
				n++
				fmt.Fprintf(&b, "      - record: docs:q%d\n        expr: %q\n", n, q)
			}
		}
	}
	if n == 0 {
		t.Fatal("no promql block in the pages")
	}
	promtool := redistest.Require(t, "promtool")
	path := filepath.Join(t.TempDir(), "docs-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the pages' PromQL: promtool: %v\n%s\n%s", err, out, b.String())
	}
}
