package panics

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRecoverLogsCountsAndReports(t *testing.T) {
	var buf bytes.Buffer
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "panics_total"}, []string{"where"})
	r := &Reporter{Log: slog.New(slog.NewTextHandler(&buf, nil)), Count: c}
	var got error
	func() {
		defer r.Recover("test.where", func(err error) { got = err })
		var m map[string]int
		m["x"] = 1 // panics: assignment to entry in nil map
	}()
	if got == nil || !strings.Contains(got.Error(), "panic in test.where") {
		t.Fatalf("then got %v, want the panic as an error", got)
	}
	if n := testutil.ToFloat64(c.WithLabelValues("test.where")); n != 1 {
		t.Fatalf("count = %v, want 1", n)
	}
	if s := buf.String(); strings.Count(s, "recovered panic") != 1 || !strings.Contains(s, "panics_test.go") {
		t.Fatalf("log %q: want one line with the stack", s)
	}
}

func TestRecoverWithoutPanicDoesNothing(t *testing.T) {
	called := false
	func() {
		defer (&Reporter{}).Recover("x", func(error) { called = true })
	}()
	if called {
		t.Fatal("then called without a panic")
	}
}

func TestNilReporterStillReports(t *testing.T) {
	var r *Reporter
	err := r.Report("w", errors.New("boom"), nil)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got %v", err)
	}
}
