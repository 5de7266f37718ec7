package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// TestCarrierServiceAPI (issue 24, item 4): PUT
// /api/v1/carriers/{name}/service takes a carrier out of service for the
// pool, DELETE puts it back; both need the token (with none configured
// the API is read-only), name a configured carrier, and leave an audit
// line; status shows in_service and the mark.
func TestCarrierServiceAPI(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	cfg := testConfig()
	cfg.HTTP.Token = "s3cret"
	current := func() *config.Config { mu.Lock(); defer mu.Unlock(); return cfg }
	set, err := carriers.New(carriers.Options{Config: current, Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil)), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Config: current, Carriers: set, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	path := PathCarriers + "/carrier-a/service"
	auth := map[string]string{"Authorization": "Bearer s3cret"}

	for _, m := range []string{http.MethodPut, http.MethodDelete} {
		if rec := do(t, h, m, path, nil); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s without a token: got %d, want 401", m, rec.Code)
		}
		if rec := do(t, h, m, path, map[string]string{"Authorization": "Bearer wrong"}); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: got %d, want 401", m, rec.Code)
		}
		if rec := do(t, h, m, PathCarriers+"/nope/service", auth); rec.Code != http.StatusNotFound {
			t.Errorf("%s of an unknown carrier: got %d, want 404", m, rec.Code)
		}
	}
	if rec := do(t, h, http.MethodGet, path, auth); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "PUT, DELETE" {
		t.Errorf("GET: got %d (Allow %q), want 405 with Allow PUT, DELETE", rec.Code, rec.Header().Get("Allow"))
	}
	if st, _ := set.State("carrier-a"); !st.InService {
		t.Fatal("a refused request took the carrier out of service")
	}
	for _, body := range []string{`{"reason": 5}`, `{"why": "x"}`, `{"reason": "` + strings.Repeat("x", 201) + `"}`, `{"reason": "a\u0007b"}`} {
		if rec := doBody(t, h, http.MethodPut, path, body, auth); rec.Code != http.StatusBadRequest {
			t.Errorf("PUT %s: got %d, want 400", body, rec.Code)
		}
	}

	rec := doBody(t, h, http.MethodPut, path, `{"reason": "maintenance window"}`, auth)
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT with the token: got %d %s, want 200", rec.Code, rec.Body.String())
	}
	t.Logf("PUT %s {\"reason\": \"maintenance window\"}\n%s", path, rec.Body.String())
	var c ServiceChange
	decodeJSON(t, rec, &c)
	if c.Status != "out_of_service" || c.Carrier != "carrier-a" || c.OutOfService == nil || c.OutOfService.Reason != "maintenance window" ||
		c.OutOfService.By == "" || c.Previous != nil {
		t.Errorf("PUT answer: %+v", c)
	}
	st := getStatus(t, h)
	a, b := st.Carriers[0], st.Carriers[1]
	if a.InService == nil || *a.InService || a.OutOfService == nil || a.OutOfService.Reason != "maintenance window" {
		t.Errorf("status of carrier-a: in_service %v, out_of_service %+v; want false with the mark", a.InService, a.OutOfService)
	}
	if b.InService == nil || !*b.InService || b.OutOfService != nil {
		t.Errorf("status of carrier-b: in_service %v, out_of_service %+v; want true", b.InService, b.OutOfService)
	}
	var out bytes.Buffer
	if err := RenderStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "carrier carrier-a is out of service: since ") || !strings.Contains(out.String(), ": maintenance window") {
		t.Errorf("rendered status lacks the out-of-service line:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), "carrier taken out of service") || !strings.Contains(logs.String(), "carrier=carrier-a") {
		t.Errorf("no audit line:\n%s", logs.String())
	}

	rec = do(t, h, http.MethodDelete, path, auth)
	if rec.Code != http.StatusOK {
		t.Fatalf("DELETE: got %d %s", rec.Code, rec.Body.String())
	}
	t.Logf("DELETE %s\n%s", path, rec.Body.String())
	c = ServiceChange{}
	decodeJSON(t, rec, &c)
	if c.Status != "in_service" || c.Previous == nil || c.Previous.Reason != "maintenance window" {
		t.Errorf("DELETE answer: %+v", c)
	}
	if st, _ := set.State("carrier-a"); !st.InService {
		t.Error("still out of service after DELETE")
	}

	// No token configured: read-only, whatever the request carries.
	mu.Lock()
	cfg = testConfig()
	mu.Unlock()
	if rec := do(t, h, http.MethodPut, path, auth); rec.Code != http.StatusForbidden {
		t.Errorf("no http.token configured: got %d, want 403", rec.Code)
	}
	if st, _ := set.State("carrier-a"); !st.InService {
		t.Error("taken out of service with no http.token configured")
	}
	// Without Carriers: 501.
	cfg2 := testConfig()
	cfg2.HTTP.Token = "s3cret"
	h2 := New(Options{Config: func() *config.Config { return cfg2 }})
	if rec := do(t, h2, http.MethodPut, path, auth); rec.Code != http.StatusNotImplemented {
		t.Errorf("no Carriers: got %d, want 501", rec.Code)
	}

}

// doBody is do with a request body.
func doBody(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestStatusShowsASR: a carrier's answer-seizure ratio on the node, and
// its time out of service below min_asr, are in the status and the
// rendered table.
func TestStatusShowsASR(t *testing.T) {
	until := time.Date(2026, 11, 22, 2, 5, 0, 0, time.UTC)
	h := New(Options{Config: testConfig, Carriers: fakeCarriers{
		"carrier-a": {Up: true, InService: false, ASR: &carriers.ASR{Seizures: 6, Answered: 2, Percent: 100.0 / 3, Window: time.Minute,
			Until: until, Reason: "asr 33.3% of 6 calls in 1m0s below min_asr 40%"}},
		"carrier-b": {Up: true, InService: true, ASR: &carriers.ASR{Seizures: 4, Answered: 4, Percent: 100, Window: time.Minute}},
	}})
	st := getStatus(t, h)
	if b, err := json.Marshal(st.Carriers); err == nil {
		t.Logf("status carriers: %s", b)
	}
	a, b := st.Carriers[0].ASR, st.Carriers[1].ASR
	if a == nil || a.Seizures != 6 || a.Answered != 2 || a.WindowSeconds != 60 || a.OutUntil == nil || !a.OutUntil.Equal(until) || st.Carriers[0].InService == nil || *st.Carriers[0].InService {
		t.Errorf("carrier-a asr %+v, in_service %v", a, st.Carriers[0].InService)
	}
	if b == nil || b.Percent != 100 || b.OutUntil != nil || b.Reason != "" {
		t.Errorf("carrier-b asr %+v", b)
	}
	var out bytes.Buffer
	if err := RenderStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	if want := "carrier carrier-a is out of service on this node until 2026-11-22 02:05:00Z: asr 33.3% of 6 calls in 1m0s below min_asr 40%\n"; !strings.Contains(out.String(), want) {
		t.Errorf("rendered status lacks %q:\n%s", want, out.String())
	}
}
