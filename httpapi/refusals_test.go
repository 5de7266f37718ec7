package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// A client that loops on a wrong token gets 401 every time, and the node
// logs refusalLogRate lines a second of it, then the count of the others
// within a second, not one warn line per request (h55).
func TestRefusedWritesLogBounded(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.Token = "tok-0123456789"
	var logs syncBuffer
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return cfg },
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Drain: func(context.Context) error { return nil }}))
	defer srv.Close()
	const requests = 200
	for range requests {
		var e *Error
		if err := Drain(context.Background(), srv.URL, "wrong-token"); !errors.As(err, &e) || e.Code != http.StatusUnauthorized {
			t.Fatalf("Drain with a wrong token: %v, want 401", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "refused API writes not logged") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	lines := strings.Count(out, "refused: wrong bearer token")
	if lines < 1 || lines >= requests/2 {
		t.Errorf("%d warn lines for %d refused requests, want a few (at most %d a second)", lines, requests, refusalLogRate)
	}
	suppressed := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "refused API writes not logged") {
			continue
		}
		_, after, _ := strings.Cut(l, "count=")
		n, err := strconv.Atoi(strings.Fields(after)[0])
		if err != nil {
			t.Fatalf("count in %q: %v", l, err)
		}
		suppressed += n
	}
	if lines+suppressed != requests {
		t.Errorf("%d lines and %d counted as not logged, want %d in all:\n%s", lines, suppressed, requests, out)
	}
}
