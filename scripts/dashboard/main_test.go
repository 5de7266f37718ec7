package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The renderer asks Prometheus every query of the real dashboard with the
// variables replaced, draws the series it gets as lines (a limit dashed),
// and says "No data" where Prometheus returned nothing.
func TestRenderTheDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/cpsguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var queries []string
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		mu.Lock()
		queries = append(queries, q)
		mu.Unlock()
		result := "[]"
		switch {
		case strings.Contains(q, "cpsguard_limit_cps{scope=\"customer\""):
			result = `[{"metric":{"name":"acme"},"values":[[1000,"20"],[1060,"20"]]}]`
		case strings.Contains(q, "cpsguard_admission_total{scope=\"customer\",result=\"admitted\""):
			result = `[{"metric":{"name":"acme"},"values":[[1000,"12"],[1030,"NaN"],[1060,"19.5"]]}]`
		case strings.Contains(q, "cpsguard_store_up"):
			result = `[{"metric":{"instance":"127.0.0.1:19060"},"values":[[1060,"0"]]}]`
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":%s}}`, result)
	}))
	defer prom.Close()
	o := Options{Prometheus: prom.URL, From: time.Unix(1000, 0), To: time.Unix(1060, 0), Step: 2 * time.Second,
		RateInterval: 15 * time.Second, Width: 1600}
	page, height, err := Render(context.Background(), d, o, prom.Client())
	if err != nil {
		t.Fatal(err)
	}
	if height < 1000 {
		t.Errorf("height %d: the dashboard's panels are taller", height)
	}
	targets := 0
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			targets += len(p.Targets)
			// Every panel is drawn, the new rows' too.
			if !strings.Contains(page, ">"+html.EscapeString(p.Title)+"<") {
				t.Errorf("page: no panel %q", p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if targets < 50 || len(queries) != targets {
		t.Errorf("%d queries for %d targets, want one for every target of every panel", len(queries), targets)
	}
	grafanaVar := regexp.MustCompile(`\$(\{|[a-z_])`) // $1 is label_replace's
	for _, q := range queries {
		if grafanaVar.MatchString(q) {
			t.Errorf("query %q: a Grafana variable left", q)
		}
	}
	for _, want := range []string{
		`Customers: admitted vs rejected CPS`,
		`stroke-dasharray="6 4"`, // acme limit
		`acme admitted`,
		`>local<`, // the Store stat's value mapping (0 + 0)
		`No data`, // panels with no series
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page: no %q", want)
		}
	}
	// The NaN at 1030 breaks the admitted line in two.
	if n := strings.Count(page, `stroke="#7EB26D" stroke-width="1.5"`); n < 2 {
		t.Errorf("acme admitted drawn as %d polylines, want 2 (a gap at the NaN)", n)
	}
}
