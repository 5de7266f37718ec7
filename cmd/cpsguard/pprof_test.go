//go:build cpsguardprof

package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPprofBuild checks the profiling build: /debug/pprof/ is served, every
// other path still reaches the operations API.
func TestPprofBuild(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := httpHandler(api)
	for _, tc := range []struct {
		name, path string
		want       int
	}{
		{"index", "/debug/pprof/", http.StatusOK},
		{"named profile", "/debug/pprof/goroutine?debug=1", http.StatusOK},
		{"heap", "/debug/pprof/heap", http.StatusOK},
		{"operations API", "/readyz", http.StatusTeapot},
		{"metrics", "/metrics", http.StatusTeapot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.want {
				t.Errorf("GET %s: got %d, want %d", tc.path, rec.Code, tc.want)
			}
		})
	}
}
