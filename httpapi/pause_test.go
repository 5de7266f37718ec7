package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// fakePauses holds pauses by carrier name, for the configured carriers of
// testConfig.
type fakePauses struct {
	mu     sync.Mutex
	paused map[string]pacing.Pause
	err    error
}

func (f *fakePauses) known(name string) bool { return name == "carrier-a" || name == "carrier-b" }

func (f *fakePauses) CarrierPause(_ context.Context, name string) (pacing.Pause, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known(name) {
		return pacing.Pause{}, false, nil
	}
	return f.paused[name], true, f.err
}

func (f *fakePauses) Unpause(_ context.Context, name string) (pacing.Pause, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known(name) {
		return pacing.Pause{}, false, nil
	}
	if f.err != nil {
		return pacing.Pause{}, true, f.err
	}
	st, ok := f.paused[name]
	if !ok {
		return pacing.Pause{}, true, nil
	}
	delete(f.paused, name)
	st.Paused, st.Changed = false, true
	return st, true, nil
}

func pausedA() pacing.Pause {
	now := time.Now()
	return pacing.Pause{Paused: true, Left: 42 * time.Second, Age: 18 * time.Second, Reason: "Retry-After 600 in a 503 to several peers, paused 1m0s",
		Until: now.Add(42 * time.Second), Since: now.Add(-18 * time.Second)}
}

// TestUnpauseAPI (issue 22, item A5): DELETE /api/v1/carriers/{name}/pause
// ends a carrier's pause for the pool; it needs the token, always (with no
// token configured the API is read-only), names a configured carrier that
// is paused, and leaves an audit line.
func TestUnpauseAPI(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	cfg := testConfig()
	cfg.HTTP.Token = "s3cret"
	current := func() *config.Config { mu.Lock(); defer mu.Unlock(); return cfg }
	pz := &fakePauses{paused: map[string]pacing.Pause{"carrier-a": pausedA()}}
	h := New(Options{Config: current, Pauses: pz, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	path := PathCarriers + "/carrier-a/pause"
	auth := map[string]string{"Authorization": "Bearer s3cret"}

	if rec := do(t, h, http.MethodDelete, path, nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("no token: got %d, want 401", rec.Code)
	}
	if rec := do(t, h, http.MethodDelete, path, map[string]string{"Authorization": "Bearer wrong"}); rec.Code != http.StatusUnauthorized {
		t.Errorf("wrong token: got %d, want 401", rec.Code)
	}
	if rec := do(t, h, http.MethodGet, path, auth); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "DELETE" {
		t.Errorf("GET: got %d (Allow %q), want 405 with Allow DELETE", rec.Code, rec.Header().Get("Allow"))
	}
	if rec := do(t, h, http.MethodDelete, PathCarriers+"/nope/pause", auth); rec.Code != http.StatusNotFound {
		t.Errorf("unknown carrier: got %d, want 404", rec.Code)
	}
	if rec := do(t, h, http.MethodDelete, PathCarriers+"/carrier-b/pause", auth); rec.Code != http.StatusNotFound ||
		!strings.Contains(decodeError(t, rec).Message, "not paused") {
		t.Errorf("carrier not paused: got %d %s, want 404 not paused", rec.Code, rec.Body.String())
	}
	if _, ok := pz.paused["carrier-a"]; !ok {
		t.Fatal("a refused request lifted the pause")
	}

	rec := do(t, h, http.MethodDelete, path, auth)
	if rec.Code != http.StatusOK {
		t.Fatalf("DELETE with the token: got %d %s, want 200", rec.Code, rec.Body.String())
	}
	var c PauseChange
	decodeJSON(t, rec, &c)
	if c.Status != "lifted" || c.Carrier != "carrier-a" || c.Previous == nil || c.Previous.SecondsLeft != 42 ||
		!strings.Contains(c.Previous.Reason, "Retry-After 600") || c.Previous.HalfOpen {
		t.Errorf("answer: %+v (previous %+v)", c, c.Previous)
	}
	if _, ok := pz.paused["carrier-a"]; ok {
		t.Error("pause still there after DELETE")
	}
	if !strings.Contains(logs.String(), "carrier pause lifted") || !strings.Contains(logs.String(), "carrier=carrier-a") {
		t.Errorf("no audit line:\n%s", logs.String())
	}

	pz.mu.Lock()
	pz.paused["carrier-a"], pz.err = pausedA(), errors.New("redis down")
	pz.mu.Unlock()
	if rec := do(t, h, http.MethodDelete, path, auth); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("store down: got %d, want 503", rec.Code)
	}

	// No token configured: read-only, whatever the request carries.
	mu.Lock()
	cfg = testConfig()
	mu.Unlock()
	pz.mu.Lock()
	pz.err = nil
	pz.mu.Unlock()
	for _, hdr := range []map[string]string{nil, auth} {
		if rec := do(t, h, http.MethodDelete, path, hdr); rec.Code != http.StatusForbidden {
			t.Errorf("no http.token configured (header %v): got %d, want 403", hdr, rec.Code)
		}
	}
	if _, ok := pz.paused["carrier-a"]; !ok {
		t.Error("a pause was lifted with no http.token configured")
	}

	// Without a Pauser: 501.
	cfg2 := testConfig()
	cfg2.HTTP.Token = "s3cret"
	h2 := New(Options{Config: func() *config.Config { return cfg2 }})
	if rec := do(t, h2, http.MethodDelete, path, auth); rec.Code != http.StatusNotImplemented {
		t.Errorf("no Pauser: got %d, want 501", rec.Code)
	}
}

// TestStatusShowsPauses: the status shows a carrier's pause (until when,
// why), and `cpsguard status` renders it; a failed read is listed.
func TestStatusShowsPauses(t *testing.T) {
	half := pacing.Pause{Paused: true, Age: time.Minute, Reason: "Retry-After 30 in a 503 to its only caller, paused 5s", Probing: true}
	pz := &fakePauses{paused: map[string]pacing.Pause{"carrier-a": pausedA(), "carrier-b": half}}
	h := New(Options{Config: testConfig, Pauses: pz, Carriers: fakeCarriers{"carrier-a": {Up: true, InService: true}, "carrier-b": {Up: true, InService: true}}})
	st := getStatus(t, h)
	a, b := st.Carriers[0].Pause, st.Carriers[1].Pause
	if a == nil || a.SecondsLeft != 42 || a.HalfOpen || time.Until(a.Until) > 42*time.Second || time.Until(a.Until) < 40*time.Second ||
		!strings.HasPrefix(a.Reason, "Retry-After 600") {
		t.Errorf("carrier-a pause: %+v", a)
	}
	if b == nil || !b.HalfOpen || !b.Probing || b.SecondsLeft != 0 {
		t.Errorf("carrier-b pause: %+v, want half-open, probing", b)
	}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{" paused ", " half-open ", "carrier carrier-a is paused until ", "(42s left): Retry-After 600 in a 503",
		"carrier carrier-b is half-open (paused since ", "one call tries it, under way: Retry-After 30"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered status lacks %q:\n%s", want, out)
		}
	}

	delete(pz.paused, "carrier-a")
	delete(pz.paused, "carrier-b")
	if st := getStatus(t, h); st.Carriers[0].Pause != nil || st.Carriers[1].Pause != nil {
		t.Errorf("pauses shown after they ended: %+v %+v", st.Carriers[0].Pause, st.Carriers[1].Pause)
	}
	pz.err = errors.New("redis down")
	if st := getStatus(t, h); len(st.Errors) != 2 || !strings.Contains(st.Errors[0], "pause: redis down") {
		t.Errorf("errors: %v, want the two failed pause reads", st.Errors)
	}
}

// TestUnpauseClient: Unpause sends the DELETE with the token; the answer
// renders for the operator; a refusal is an *Error.
func TestUnpauseClient(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.Token = "s3cret"
	pz := &fakePauses{paused: map[string]pacing.Pause{"carrier-a": pausedA()}}
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return cfg }, Pauses: pz}))
	defer srv.Close()
	ctx := context.Background()
	var e *Error
	if _, err := Unpause(ctx, srv.URL, "", "carrier-a"); !errors.As(err, &e) || e.Code != http.StatusUnauthorized {
		t.Fatalf("Unpause without a token: %v, want http 401", err)
	}
	c, err := Unpause(ctx, srv.URL, "s3cret", "carrier-a")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := RenderPauseChange(&buf, c); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.HasPrefix(got, "pause lifted: carrier carrier-a was paused until ") || !strings.HasSuffix(got, "\ncalls go to it again\n") {
		t.Errorf("RenderPauseChange:\n%s", got)
	}
	if _, err := Unpause(ctx, srv.URL, "s3cret", "carrier-a"); !errors.As(err, &e) || e.Code != http.StatusNotFound {
		t.Fatalf("Unpause of a carrier not paused: %v, want http 404", err)
	}
}

func decodeJSON(t *testing.T, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
}
