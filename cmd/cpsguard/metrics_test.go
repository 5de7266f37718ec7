package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpsguard/cpsguard/metrics"
)

// registeredFamilies returns the name of every metric family metrics.New
// registers, read from the collectors' descriptions.
func registeredFamilies(t *testing.T) []string {
	t.Helper()
	var descs []*prometheus.Desc
	ch := make(chan *prometheus.Desc)
	done := make(chan struct{})
	go func() {
		for d := range ch {
			descs = append(descs, d)
		}
		close(done)
	}()
	reg := &describer{ch: ch}
	metrics.New(reg)
	close(ch)
	<-done
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for _, d := range descs {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("metrics.New registered %d families: %v", len(names), names)
	}
	return names
}

// describer is a prometheus.Registerer that only collects descriptions.
type describer struct{ ch chan<- *prometheus.Desc }

func (d *describer) Register(c prometheus.Collector) error { c.Describe(d.ch); return nil }
func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		c.Describe(d.ch)
	}
}
func (d *describer) Unregister(prometheus.Collector) bool { return false }

// A node's first scrape, before any call, shows every family cpsguard
// registers with at least one series: no dashboard panel reads "No data"
// and no rate() alert misses the first event. Only the store latency
// histogram waits for a store call (there is none on the in-process store).
func TestFirstScrapeHasEveryFamily(t *testing.T) {
	addr, cfgPath := startNode(t)
	waitFor(t, "the node to be ready", func() bool { return cpsguard(t, nil, "probe", "--config", cfgPath).code == 0 })
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sampled := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suffix)
		}
		sampled[name] = true
	}
	for _, name := range registeredFamilies(t) {
		if name == "cpsguard_store_duration_seconds" {
			continue
		}
		if !sampled[name] {
			t.Errorf("%s: no series in the first scrape", name)
		}
	}
}
