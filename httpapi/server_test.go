package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

func testConfig() *config.Config {
	return &config.Config{
		NodeID: "node-1",
		Store:  config.Store{KeyPrefix: "cpsguard", OnError: "local"},
		HTTP:   config.HTTP{Listen: "127.0.0.1:9090"},
		Peers: []config.Peer{
			{Name: "dialer-1", CPS: 50},
			{Name: "dialer-2", CPS: 0.5},
		},
		Customers: []config.Customer{{Name: "acme", CPS: 20}},
		Carriers: []config.Carrier{
			{Name: "carrier-a", CPS: 10, MaxWait: 2 * time.Second},
			{Name: "carrier-b", CPS: 5, MaxWait: time.Second},
		},
	}
}

// fakeStore answers Counts from a map by key and Queue from a map by key.
type fakeStore struct {
	mu        sync.Mutex
	counts    map[string]int
	queued    map[string]int
	waits     map[string]time.Duration
	sent      map[string]int
	countErr  error
	queueErr  error
	gotCounts [][]admission.Bucket
	gotQueue  map[string]time.Duration
}

func (f *fakeStore) Counts(_ context.Context, buckets []admission.Bucket) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotCounts = append(f.gotCounts, buckets)
	if f.countErr != nil {
		return nil, f.countErr
	}
	out := make([]int, len(buckets))
	for i, b := range buckets {
		out[i] = f.counts[b.Key]
	}
	return out, nil
}

func (f *fakeStore) Queue(_ context.Context, key string, interval time.Duration) (pacing.QueueState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gotQueue == nil {
		f.gotQueue = map[string]time.Duration{}
	}
	f.gotQueue[key] = interval
	if f.queueErr != nil {
		return pacing.QueueState{}, f.queueErr
	}
	return pacing.QueueState{Queued: f.queued[key], Sent: f.sent[key], Wait: f.waits[key]}, nil
}

func newFake() *fakeStore {
	return &fakeStore{
		counts: map[string]int{
			"cpsguard:{peer:dialer-1}": 12,
			"cpsguard:{peer:dialer-2}": 1,
			"cpsguard:{customer:acme}": 5,
		},
		queued: map[string]int{"cpsguard:{carrier:carrier-a}": 4},
		waits:  map[string]time.Duration{"cpsguard:{carrier:carrier-a}": 404 * time.Millisecond},
		sent:   map[string]int{"cpsguard:{carrier:carrier-a}": 9},
	}
}

// do sends one request to h and returns the recorded answer.
func do(t *testing.T, h http.Handler, method, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decodeError(t *testing.T, rec *httptest.ResponseRecorder) Error {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type: got %q, want application/json", ct)
	}
	var e Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: not JSON: %v", rec.Body.String(), err)
	}
	if e.Message == "" {
		t.Errorf("error body %q: empty \"error\"", rec.Body.String())
	}
	return e
}

func TestHealthAndReady(t *testing.T) {
	var notReady error
	h := New(Options{
		Config: testConfig,
		Ready:  func() error { return notReady },
	})
	tests := []struct {
		name     string
		method   string
		path     string
		notReady error
		want     int
	}{
		{"healthz", http.MethodGet, PathHealthz, nil, 200},
		{"healthz HEAD", http.MethodHead, PathHealthz, nil, 200},
		{"healthz while not ready", http.MethodGet, PathHealthz, errors.New("sip down"), 200},
		{"readyz ready", http.MethodGet, PathReadyz, nil, 200},
		{"readyz not ready", http.MethodGet, PathReadyz, errors.New("store unusable"), 503},
		{"readyz POST", http.MethodPost, PathReadyz, nil, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notReady = tt.notReady
			rec := do(t, h, tt.method, tt.path, nil)
			if rec.Code != tt.want {
				t.Fatalf("%s %s: got %d, want %d (body %s)", tt.method, tt.path, rec.Code, tt.want, rec.Body)
			}
			if tt.want == 503 {
				var hl Health
				if err := json.Unmarshal(rec.Body.Bytes(), &hl); err != nil || hl.Error != "store unusable" {
					t.Errorf("readyz body: got %s (%v), want the Ready error", rec.Body, err)
				}
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	h := New(Options{Config: testConfig, Registry: prometheus.NewRegistry(), Reload: func() error { return nil }})
	tests := []struct {
		name      string
		method    string
		path      string
		want      int
		wantAllow string
	}{
		{"unknown path", http.MethodGet, "/nope", 404, ""},
		{"status with trailing slash", http.MethodGet, PathStatus + "/", 404, ""},
		{"api root", http.MethodGet, "/api/v1/", 404, ""},
		{"status POST", http.MethodPost, PathStatus, 405, "GET, HEAD"},
		{"status DELETE", http.MethodDelete, PathStatus, 405, "GET, HEAD"},
		{"reload GET", http.MethodGet, PathReload, 405, "POST"},
		{"reload PUT", http.MethodPut, PathReload, 405, "POST"},
		{"metrics POST", http.MethodPost, PathMetrics, 405, "GET, HEAD"},
		{"healthz PUT", http.MethodPut, PathHealthz, 405, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, h, tt.method, tt.path, nil)
			if rec.Code != tt.want {
				t.Fatalf("%s %s: got %d, want %d", tt.method, tt.path, rec.Code, tt.want)
			}
			decodeError(t, rec)
			if got := rec.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow: got %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.New(reg)
	m.SyncLimits(testConfig())
	h := New(Options{Config: testConfig, Registry: reg})
	rec := do(t, h, http.MethodGet, PathMetrics, nil)
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: got %d, want 200", rec.Code)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`cpsguard_limit_cps{name="carrier-a",scope="carrier"} 10`,
		"go_goroutines",
		"process_start_time_seconds",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics: %q missing", want)
		}
	}

	t.Run("openmetrics", func(t *testing.T) {
		rec := do(t, h, http.MethodGet, PathMetrics, map[string]string{
			"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
		})
		if ct := rec.Header().Get("Content-Type"); rec.Code != 200 || !strings.HasPrefix(ct, "application/openmetrics-text") {
			t.Fatalf("GET /metrics asking for OpenMetrics: got %d %q, want 200 application/openmetrics-text", rec.Code, ct)
		}
		if body := rec.Body.String(); !strings.HasSuffix(body, "# EOF\n") {
			t.Errorf("OpenMetrics answer does not end with # EOF:\n…%s", body[max(0, len(body)-200):])
		}
		plain := do(t, h, http.MethodGet, PathMetrics, nil)
		if ct := plain.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("GET /metrics without Accept: Content-Type %q, want text/plain", ct)
		}
	})

	t.Run("no registry", func(t *testing.T) {
		h := New(Options{Config: testConfig})
		if rec := do(t, h, http.MethodGet, PathMetrics, nil); rec.Code != 404 {
			t.Errorf("GET /metrics without registry: got %d, want 404", rec.Code)
		}
	})
}

func getStatus(t *testing.T, h http.Handler) Status {
	t.Helper()
	rec := do(t, h, http.MethodGet, PathStatus, nil)
	if rec.Code != 200 {
		t.Fatalf("GET status: got %d, want 200 (body %s)", rec.Code, rec.Body)
	}
	var st Status
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("decode status: %v", err)
	}
	return st
}

func intp(n int) *int           { return &n }
func floatp(f float64) *float64 { return &f }

func TestStatus(t *testing.T) {
	store := newFake()
	loaded := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	h := New(Options{
		Config:    testConfig,
		Counts:    store,
		Queue:     store,
		StoreMode: func() string { return "redis" },
		LoadedAt:  func() time.Time { return loaded },
	})
	st := getStatus(t, h)

	if st.NodeID != "node-1" || st.StoreMode != "redis" || !st.LoadedAt.Equal(loaded) {
		t.Errorf("header: got node %q store %q loaded %v, want node-1 redis %v", st.NodeID, st.StoreMode, st.LoadedAt, loaded)
	}
	if want := ConfigHash(testConfig()); st.ConfigHash != want || !strings.HasPrefix(want, "sha256:") {
		t.Errorf("config hash: got %q, want %q", st.ConfigHash, want)
	}
	if len(st.Errors) != 0 {
		t.Errorf("errors: got %v, want none", st.Errors)
	}
	if st.DuplicateNodeID {
		t.Errorf("duplicate_node_id without a DuplicateNodeID func: got true, want false")
	}
	wantPeers := []Entry{
		{Name: "dialer-1", LimitCPS: 50, WindowLimit: 50, WindowSeconds: 1.01, Current: intp(12), Percent: floatp(24)},
		{Name: "dialer-2", LimitCPS: 0.5, WindowLimit: 1, WindowSeconds: 2.01, Current: intp(1), Percent: floatp(100)},
	}
	wantCarriers := []Entry{
		{Name: "carrier-a", LimitCPS: 10, WindowLimit: 10, WindowSeconds: 1, Current: intp(9), Percent: floatp(90), Queued: intp(4), WaitSeconds: floatp(0.404), MaxWaitSeconds: 2},
		{Name: "carrier-b", LimitCPS: 5, WindowLimit: 5, WindowSeconds: 1, Current: intp(0), Percent: floatp(0), Queued: intp(0), WaitSeconds: floatp(0), MaxWaitSeconds: 1},
	}
	check := func(what string, got, want []Entry) {
		t.Helper()
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s:\ngot  %s\nwant %s", what, gj, wj)
		}
	}
	check("peers", st.Peers, wantPeers)
	check("customers", st.Customers, []Entry{{Name: "acme", LimitCPS: 20, WindowLimit: 20, WindowSeconds: 1.01, Current: intp(5), Percent: floatp(25)}})
	check("carriers", st.Carriers, wantCarriers)

	// The status reads the buckets exactly as admission keys and sizes them:
	// one Counts call per scope, Queue with the pacing interval.
	if n := len(store.gotCounts); n != 2 {
		t.Fatalf("Counts calls: got %d, want 2 (peers, customers)", n)
	}
	limit, window := admission.LimitFor(0.5)
	if got, want := store.gotCounts[0][1], (admission.Bucket{Key: "cpsguard:{peer:dialer-2}", Limit: limit, Window: window}); got != want {
		t.Errorf("bucket of dialer-2: got %+v, want %+v", got, want)
	}
	if got, want := store.gotQueue["cpsguard:{carrier:carrier-b}"], 202*time.Millisecond; got != want {
		t.Errorf("queue interval of carrier-b (5 cps): got %v, want %v", got, want)
	}

	if c := st.Carriers[0]; c.Current == nil || *c.Current != 9 || *c.Percent != 90 {
		t.Errorf("carrier-a current: got %v / %v, want 9 / 90%% (slots of the last second)", c.Current, c.Percent)
	}
}

func TestStatusStoreErrors(t *testing.T) {
	store := newFake()
	store.countErr = errors.New("redis: i/o timeout")
	store.queueErr = errors.New("redis: connection refused")
	h := New(Options{Config: testConfig, Counts: store, Queue: store})
	st := getStatus(t, h)
	if st.StoreMode != "local" {
		t.Errorf("store mode without func and without redis: got %q, want local", st.StoreMode)
	}
	for _, e := range slices.Concat(st.Peers, st.Customers, st.Carriers) {
		if e.Current != nil || e.Percent != nil || e.Queued != nil || e.WaitSeconds != nil {
			t.Errorf("entry %s: got figures %+v, want null after a store error", e.Name, e)
		}
	}
	if got := len(st.Errors); got != 4 { // peers, customers, carrier-a, carrier-b
		t.Errorf("errors: got %d %v, want 4", got, st.Errors)
	}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "store errors:\n  peers: counts: redis: i/o timeout") {
		t.Errorf("render: store errors missing:\n%s", buf.String())
	}
}

func TestStatusWithoutConfig(t *testing.T) {
	h := New(Options{Config: func() *config.Config { return nil }})
	rec := do(t, h, http.MethodGet, PathStatus, nil)
	if rec.Code != 503 {
		t.Errorf("status without config: got %d, want 503", rec.Code)
	}
	decodeError(t, rec)
}

func TestReload(t *testing.T) {
	bad := &config.ValidationError{File: "/etc/cpsguard/cpsguard.yaml", Errors: []string{
		"carriers[1].cps: must be > 0 (got -3)",
		"routes.default[0]: unknown carrier \"nope\"",
		"CPSGUARD_HTTP_LISTEN (http.listen): must be host:port (got \"x\")",
	}, Where: []config.Position{{Line: 27, Column: 56}, {Line: 29}, {}}}
	// Each error after its place in the file, as cpsguard check prints it.
	badErrs := []string{
		"/etc/cpsguard/cpsguard.yaml:27:56: carriers[1].cps: must be > 0 (got -3)",
		"/etc/cpsguard/cpsguard.yaml:29: routes.default[0]: unknown carrier \"nope\"",
		"CPSGUARD_HTTP_LISTEN (http.listen): must be host:port (got \"x\")",
	}
	tests := []struct {
		name      string
		token     string
		auth      string
		reloadErr error
		noReload  bool
		want      int
		wantErrs  []string
		wantCalls int
	}{
		{name: "no token configured: read-only", want: 403},
		{name: "no token configured, any header: read-only", auth: "Bearer whatever", want: 403},
		{name: "token set, no header", token: "s3cret", want: 401},
		{name: "token set, wrong token", token: "s3cret", auth: "Bearer s3cret2", want: 401},
		{name: "token set, empty bearer", token: "s3cret", auth: "Bearer ", want: 401},
		{name: "token set, basic auth", token: "s3cret", auth: "Basic czNjcmV0", want: 401},
		{name: "token set, token without scheme", token: "s3cret", auth: "s3cret", want: 401},
		{name: "token set, right token", token: "s3cret", auth: "Bearer s3cret", want: 200, wantCalls: 1},
		{name: "token set, scheme in lower case", token: "s3cret", auth: "bearer s3cret", want: 200, wantCalls: 1},
		{name: "bad file", token: "s3cret", auth: "Bearer s3cret", reloadErr: bad, want: 422,
			wantErrs: badErrs, wantCalls: 1},
		{name: "bad file wrapped", token: "s3cret", auth: "Bearer s3cret", reloadErr: errors.Join(errors.New("reload"), bad), want: 422,
			wantErrs: badErrs, wantCalls: 1},
		{name: "unreadable file", token: "s3cret", auth: "Bearer s3cret", reloadErr: errors.New("open /etc/cpsguard/cpsguard.yaml: permission denied"), want: 500,
			wantErrs: []string{"open /etc/cpsguard/cpsguard.yaml: permission denied"}, wantCalls: 1},
		{name: "reload not wired", token: "s3cret", auth: "Bearer s3cret", noReload: true, want: 501},
		{name: "reload not wired, no token: read-only first", noReload: true, want: 403},
		{name: "reload not wired still needs the token", token: "s3cret", noReload: true, want: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.HTTP.Token = tt.token
			calls := 0
			o := Options{Config: func() *config.Config { return cfg }}
			if !tt.noReload {
				o.Reload = func() error { calls++; return tt.reloadErr }
			}
			h := New(o)
			hdr := map[string]string{}
			if tt.auth != "" {
				hdr["Authorization"] = tt.auth
			}
			rec := do(t, h, http.MethodPost, PathReload, hdr)
			if rec.Code != tt.want {
				t.Fatalf("POST reload: got %d, want %d (body %s)", rec.Code, tt.want, rec.Body)
			}
			if calls != tt.wantCalls {
				t.Errorf("Reload calls: got %d, want %d", calls, tt.wantCalls)
			}
			if tt.want == 200 {
				var res ReloadResult
				if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Status != "reloaded" || res.ConfigHash == "" {
					t.Errorf("reload body: got %s (%v), want status reloaded and a hash", rec.Body, err)
				}
				return
			}
			e := decodeError(t, rec)
			if tt.want == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			if tt.wantErrs != nil && !slices.Equal(e.Errors, tt.wantErrs) {
				t.Errorf("errors: got %q, want %q", e.Errors, tt.wantErrs)
			}
			if strings.Contains(rec.Body.String(), "s3cret") {
				t.Errorf("answer leaks the token: %s", rec.Body)
			}
		})
	}
}

// A reload that changes http.token takes effect on the next request.
func TestReloadTokenFollowsConfig(t *testing.T) {
	var mu sync.Mutex
	cfg := testConfig()
	cfg.HTTP.Token = "old"
	current := func() *config.Config { mu.Lock(); defer mu.Unlock(); return cfg }
	h := New(Options{Config: current, Reload: func() error {
		next := testConfig()
		next.HTTP.Token = "new"
		mu.Lock()
		cfg = next
		mu.Unlock()
		return nil
	}})
	if rec := do(t, h, http.MethodPost, PathReload, map[string]string{"Authorization": "Bearer old"}); rec.Code != 200 {
		t.Fatalf("reload with old token: got %d, want 200", rec.Code)
	}
	if rec := do(t, h, http.MethodPost, PathReload, map[string]string{"Authorization": "Bearer old"}); rec.Code != 401 {
		t.Errorf("reload with old token after the change: got %d, want 401", rec.Code)
	}
	if rec := do(t, h, http.MethodPost, PathReload, map[string]string{"Authorization": "Bearer new"}); rec.Code != 200 {
		t.Errorf("reload with new token: got %d, want 200", rec.Code)
	}
}

func TestConfigHash(t *testing.T) {
	a, b := testConfig(), testConfig()
	if ConfigHash(a) != ConfigHash(b) {
		t.Errorf("equal configs: hashes differ")
	}
	b.Carriers[0].CPS = 11
	if ConfigHash(a) == ConfigHash(b) {
		t.Errorf("carrier cps changed: hash unchanged")
	}
	c := testConfig()
	c.HTTP.Token = "tok"
	c.Store.Redis = &config.Redis{Addrs: []string{"127.0.0.1:6379"}, Password: "pw"}
	d := testConfig()
	d.HTTP.Token = "other"
	d.Store.Redis = &config.Redis{Addrs: []string{"127.0.0.1:6379"}, Password: "other"}
	if ConfigHash(c) != ConfigHash(d) {
		t.Errorf("configs differing only in secrets: hashes differ, so the hash depends on the secrets")
	}
	if ConfigHash(nil) != "" {
		t.Errorf("ConfigHash(nil): want empty")
	}
}

// The default load time is the first time the server saw the snapshot, and
// it moves when the snapshot changes.
func TestDefaultLoadedAt(t *testing.T) {
	var mu sync.Mutex
	cfg := testConfig()
	h := New(Options{Config: func() *config.Config { mu.Lock(); defer mu.Unlock(); return cfg }})
	first := getStatus(t, h).LoadedAt
	if again := getStatus(t, h).LoadedAt; !again.Equal(first) {
		t.Errorf("same snapshot: loaded_at moved from %v to %v", first, again)
	}
	time.Sleep(2 * time.Millisecond)
	mu.Lock()
	cfg = testConfig()
	mu.Unlock()
	if next := getStatus(t, h).LoadedAt; !next.After(first) {
		t.Errorf("new snapshot: loaded_at %v, want after %v", next, first)
	}
}

func TestFetchStatusAndRender(t *testing.T) {
	store := newFake()
	h := New(Options{
		Config: testConfig, Counts: store, Queue: store,
		StoreMode: func() string { return "fallback" },
		Carriers: fakeCarriers{
			"carrier-a": {Up: true, EffectiveCPS: 7, InService: true},
			"carrier-b": {Up: false, Since: time.Date(2026, 11, 22, 2, 3, 0, 0, time.UTC),
				Reason: "probe: 3 failures in a row (last: no answer in 1s)", EffectiveCPS: 5, InService: true},
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx := context.Background()
	for _, addr := range []string{srv.URL, srv.URL + "/", strings.TrimPrefix(srv.URL, "http://")} {
		st, err := FetchStatus(ctx, addr)
		if err != nil {
			t.Fatalf("FetchStatus(%q): %v", addr, err)
		}
		if st.StoreMode != "fallback" || len(st.Carriers) != 2 {
			t.Errorf("FetchStatus(%q): got %+v", addr, st)
		}
	}

	st, err := FetchStatus(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	st.ConfigHash = "sha256:0123456789abcdef0123"
	st.LoadedAt = time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	st.Time = st.LoadedAt.Add(5*time.Minute + 3*time.Second + 400*time.Millisecond)
	var buf bytes.Buffer
	if err := RenderStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	want := `node node-1   store fallback   config 0123456789ab   loaded 2026-11-22 02:00:00Z (5m3s ago)

PEERS        LIMIT  CURRENT     %  QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  dialer-1      50       12   24%
  dialer-2     0.5        1  100%

CUSTOMERS    LIMIT  CURRENT     %  QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  acme          20        5   25%

CARRIERS     LIMIT  CURRENT     %  QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  carrier-a     10        9   90%       4  404ms        2s     up          7
  carrier-b      5        0    0%       0     0s        1s   down          5

carrier carrier-b is down: probe: 3 failures in a row (last: no answer in 1s) (since 2026-11-22T02:03:00Z)
`
	if got := buf.String(); got != want {
		t.Errorf("RenderStatus:\ngot\n%s\nwant\n%s", got, want)
	}
}

// A node that sees another process under its node_id says so in the status
// answer and at the top of the table.
func TestStatusDuplicateNodeID(t *testing.T) {
	h := New(Options{Config: testConfig, DuplicateNodeID: func() bool { return true }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathStatus, nil))
	if !strings.Contains(rec.Body.String(), `"duplicate_node_id": true`) {
		t.Errorf("status body lacks \"duplicate_node_id\": true:\n%s", rec.Body.String())
	}
	st := getStatus(t, h)
	var buf bytes.Buffer
	if err := RenderStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	if want := "\nWARNING: another process runs with node_id node-1 in the same Redis\n"; !strings.Contains(buf.String(), want) {
		t.Errorf("RenderStatus: lacks %q:\n%s", want, buf.String())
	}
}

func TestFetchStatusErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("json error", func(t *testing.T) {
		srv := httptest.NewServer(New(Options{Config: func() *config.Config { return nil }}))
		defer srv.Close()
		_, err := FetchStatus(ctx, srv.URL)
		var e *Error
		if !errors.As(err, &e) || e.Code != 503 || e.Message != "no configuration loaded" {
			t.Errorf("got %v, want *Error 503 no configuration loaded", err)
		}
	})
	t.Run("not cpsguard", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "upstream down")
		}))
		defer srv.Close()
		_, err := FetchStatus(ctx, srv.URL)
		var e *Error
		if !errors.As(err, &e) || e.Code != 502 || e.Message != "upstream down" {
			t.Errorf("got %v, want *Error 502 upstream down", err)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		if _, err := FetchStatus(ctx, url); err == nil {
			t.Errorf("FetchStatus of a closed server: got nil error")
		}
	})
}

func TestNewPanicsWithoutConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("New without Config: want a panic")
		}
	}()
	New(Options{})
}

func TestLoopback(t *testing.T) {
	for listen, want := range map[string]bool{
		"127.0.0.1:9090": true, "[::1]:9090": true, "localhost:9090": true,
		"0.0.0.0:9090": false, ":9090": false, "10.0.0.1:9090": false, "bogus": false,
	} {
		if got := loopback(listen); got != want {
			t.Errorf("loopback(%q): got %v, want %v", listen, got, want)
		}
	}
}

// TestWritesNeedAToken: with http.token empty (the default) the API is
// read-only: every endpoint that changes the node answers 403, says that
// http.token must be set, and changes nothing; the reads still answer.
func TestWritesNeedAToken(t *testing.T) {
	cfg := testConfig() // HTTP.Token empty
	lim := limits.New(limits.NewLocalStore(nil), limits.Options{})
	if _, err := lim.Set(context.Background(), limits.Override{Scope: "peer", Name: "dialer-2", CPS: 1}, time.Hour); err != nil {
		t.Fatal(err)
	}
	reloads := 0
	h := New(Options{Config: func() *config.Config { return cfg }, Limits: lim,
		Reload: func() error { reloads++; return nil }})
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, PathReload, ""},
		{http.MethodPut, PathLimits + "/peer/dialer-1", `{"cps": 1000, "ttl": "1h"}`},
		{http.MethodPut, PathLimits + "/carrier/carrier-a", `{"cps": 1000, "ttl": "1h"}`},
		{http.MethodDelete, PathLimits + "/peer/dialer-2", ""},
	} {
		for _, auth := range []string{"", "Bearer anything"} {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusForbidden {
				t.Errorf("%s %s (auth %q) with no http.token: got %d, want 403 (body %s)", tc.method, tc.path, auth, rec.Code, rec.Body)
				continue
			}
			if e := decodeError(t, rec); !strings.Contains(e.Message, "http.token") {
				t.Errorf("%s %s: message %q does not say http.token must be set", tc.method, tc.path, e.Message)
			}
		}
	}
	if reloads != 0 {
		t.Errorf("reloads run without a token: %d, want 0", reloads)
	}
	if got := lim.List(); len(got) != 1 || got[0].Name != "dialer-2" || got[0].CPS != 1 {
		t.Errorf("overrides after refused writes = %+v, want only dialer-2's, unchanged", got)
	}
	for _, path := range []string{PathStatus, PathLimits, PathHealthz} {
		if rec := do(t, h, http.MethodGet, path, nil); rec.Code != 200 {
			t.Errorf("GET %s with no http.token: got %d, want 200 (reads stay open)", path, rec.Code)
		}
	}
}

// A scope with a burst shows its token bucket (tokens left of burst; its
// current and percent count the tokens in use), and every extra window
// shows the calls in it, read in the same Counts call as the scope's first
// bucket, with the keys and sizes admission uses.
func TestStatusBurstAndWindows(t *testing.T) {
	cfg := testConfig()
	cfg.Peers[0].CPS, cfg.Peers[0].Burst = 10, 30
	cfg.Peers[0].Windows = []config.Window{{Calls: 600, Per: time.Minute}}
	cfg.Customers[0].Windows = []config.Window{{Calls: 600, Per: time.Minute}, {Calls: 20000, Per: 24 * time.Hour}}
	store := newFake()
	store.counts["cpsguard:{peer:dialer-1}:tb"] = 12 // tokens in use
	store.counts["cpsguard:{peer:dialer-1}:w60s"] = 412
	store.counts["cpsguard:{customer:acme}:w60s"] = 300
	store.counts["cpsguard:{customer:acme}:w86400s"] = 9000
	h := New(Options{Config: func() *config.Config { return cfg }, Counts: store, Queue: store})
	st := getStatus(t, h)

	check := func(what string, got, want any) {
		t.Helper()
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s:\ngot  %s\nwant %s", what, gj, wj)
		}
	}
	check("dialer-1", st.Peers[0], Entry{
		Name: "dialer-1", LimitCPS: 10, WindowLimit: 30, WindowSeconds: 0, Current: intp(12), Percent: floatp(40),
		Burst: 30, Tokens: intp(18),
		Windows: []WindowState{{Calls: 600, PerSeconds: 60, Current: intp(412), Percent: floatp(100 * 412.0 / 600)}},
	})
	check("acme", st.Customers[0], Entry{
		Name: "acme", LimitCPS: 20, WindowLimit: 20, WindowSeconds: 1.01, Current: intp(5), Percent: floatp(25),
		Windows: []WindowState{
			{Calls: 600, PerSeconds: 60, Current: intp(300), Percent: floatp(50)},
			{Calls: 20000, PerSeconds: 86400, Current: intp(9000), Percent: floatp(45)},
		},
	})
	// The buckets read are admission's: the token bucket replaces the 1 s
	// window, then the windows, all of a scope group in one call.
	if n := len(store.gotCounts); n != 2 {
		t.Fatalf("Counts calls: got %d, want 2 (peers, customers)", n)
	}
	wantPeerBuckets := []admission.Bucket{
		admission.TokenBucket("cpsguard:{peer:dialer-1}", 10, 30),
		admission.WindowBucket("cpsguard:{peer:dialer-1}", 600, time.Minute),
	}
	if got := store.gotCounts[0][:2]; !slices.Equal(got, wantPeerBuckets) {
		t.Errorf("buckets of dialer-1: got %+v, want %+v", got, wantPeerBuckets)
	}

	// A store that cannot be read leaves every figure null.
	store.countErr = errors.New("redis: i/o timeout")
	st = getStatus(t, h)
	p := st.Peers[0]
	if p.Tokens != nil || p.Current != nil || p.Windows[0].Current != nil || p.Windows[0].Percent != nil {
		t.Errorf("dialer-1 after a store error: got %+v, want null figures", p)
	}

	// The table: a TOKENS column (left/burst) and a WINDOWS column.
	st.Errors = nil
	store.countErr = nil
	st = getStatus(t, h)
	st.ConfigHash, st.LoadedAt, st.Time = "sha256:0123456789abcdef", time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC), time.Time{}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	want := `node node-1   store local   config 0123456789ab   loaded 2026-11-22 02:00:00Z

PEERS        LIMIT  CURRENT     %  TOKENS  WINDOWS                     QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  dialer-1      10       12   40%   18/30  1m 412/600
  dialer-2     0.5        1  100%

CUSTOMERS    LIMIT  CURRENT     %  TOKENS  WINDOWS                     QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  acme          20        5   25%          1m 300/600, 24h 9000/20000

CARRIERS     LIMIT  CURRENT     %  TOKENS  WINDOWS                     QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  carrier-a     10        9   90%                                           4  404ms        2s      -          -
  carrier-b      5        0    0%                                           0     0s        1s      -          -

`
	if got := buf.String(); got != want {
		t.Errorf("RenderStatus:\ngot\n%s\nwant\n%s", got, want)
	}
}

// fakeCarriers is what a node knows of its carriers, by name.
type fakeCarriers map[string]carriers.State

func (f fakeCarriers) State(name string) (carriers.State, bool) {
	st, ok := f[name]
	return st, ok
}

func (f fakeCarriers) TakeOut(context.Context, string, string, string) (*carriers.Out, bool, error) {
	return nil, false, nil
}

func (f fakeCarriers) PutBack(context.Context, string) (*carriers.Out, bool, error) {
	return nil, false, nil
}

// TestStatusDestinations: every destinations[] entry is listed by its
// prefix with its limit, its 1 s window (with a cps), its extra windows and
// its live calls of max_calls, read in the same calls as the others; a
// destination without cps shows only its windows; repeat_dial shows what
// it allows (never a number). The table gets a DESTINATIONS section.
func TestStatusDestinations(t *testing.T) {
	cfg := testConfig()
	cfg.Destinations = []config.Destination{
		{Prefix: "+44", CPS: 5, MaxCalls: 30},
		{Prefix: "1900", Windows: []config.Window{{Calls: 100, Per: time.Hour}}},
	}
	cfg.RepeatDial = config.RepeatDial{Calls: 3, Per: time.Minute}
	pol := policy.Of(cfg)
	uk, premium := pol.Destinations()[0], pol.Destinations()[1]
	store := newFake()
	store.counts[uk.Key] = 4
	store.counts[premium.Key+":w3600s"] = 40
	fc := fakeCalls{uk.CallsKey: 12}
	h := New(Options{Config: func() *config.Config { return cfg }, Counts: store, Queue: store, Calls: fc})
	st := getStatus(t, h)
	if len(st.Destinations) != 2 {
		t.Fatalf("destinations: got %+v, want 2", st.Destinations)
	}
	check := func(what string, got, want any) {
		t.Helper()
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s:\ngot  %s\nwant %s", what, gj, wj)
		}
	}
	check("+44", st.Destinations[0], Entry{
		Name: "+44", LimitCPS: 5, WindowLimit: 5, WindowSeconds: 1.01, Current: intp(4), Percent: floatp(80),
		MaxCalls: 30, ActiveCalls: intp(12),
	})
	check("1900", st.Destinations[1], Entry{
		Name:    "1900",
		Windows: []WindowState{{Calls: 100, PerSeconds: 3600, Current: intp(40), Percent: floatp(40)}},
	})
	check("repeat_dial", st.RepeatDial, &RepeatDialState{Calls: 3, PerSeconds: 60})
	if n := len(store.gotCounts); n != 3 {
		t.Fatalf("Counts calls: got %d, want 3 (peers, customers, destinations)", n)
	}
	if got := store.gotCounts[2]; len(got) != 2 || got[0].Key != uk.Key || got[1].Key != premium.Key+":w3600s" {
		t.Errorf("destination buckets read: %+v, want +44's 1 s window and 1900's hour", got)
	}

	st.ConfigHash, st.LoadedAt, st.Time = "sha256:0123456789abcdef", time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC), time.Time{}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	want := `node node-1   store local   config 0123456789ab   loaded 2026-11-22 02:00:00Z

PEERS         LIMIT  CURRENT     %  CALLS  WINDOWS    QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  dialer-1       50       12   24%      -
  dialer-2      0.5        1  100%      -

CUSTOMERS     LIMIT  CURRENT     %  CALLS  WINDOWS    QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  acme           20        5   25%      -

DESTINATIONS  LIMIT  CURRENT     %  CALLS  WINDOWS    QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  +44             5        4   80%  12/30
  1900            -        -     -      -  1h 40/100

CARRIERS      LIMIT  CURRENT     %  CALLS  WINDOWS    QUEUED   WAIT  MAX WAIT  STATE  EFFECTIVE
  carrier-a      10        9   90%      -                  4  404ms        2s      -          -
  carrier-b       5        0    0%      -                  0     0s        1s      -          -

repeat dial: at most 3 calls to one number in 1m
`
	if got := buf.String(); got != want {
		t.Errorf("RenderStatus:\ngot\n%s\nwant\n%s", got, want)
	}
}
