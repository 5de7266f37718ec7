package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

func TestListenURL(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.1:9090", "http://127.0.0.1:9090"},
		{"0.0.0.0:9090", "http://127.0.0.1:9090"},
		{":9090", "http://127.0.0.1:9090"},
		{"[::]:9090", "http://[::1]:9090"},
		// The Kubernetes examples bracket the node IP of either family.
		{"[10.20.0.5]:9090", "http://10.20.0.5:9090"},
		{"[fd00:20::5]:9090", "http://[fd00:20::5]:9090"},
		{"[::1]:9191", "http://[::1]:9191"},
		{"10.0.0.5:9090", "http://10.0.0.5:9090"},
		{"localhost:9090", "http://localhost:9090"},
		{"http://10.0.0.5:9090/", "http://10.0.0.5:9090"},
	} {
		if got := ListenURL(tc.listen); got != tc.want {
			t.Errorf("ListenURL(%q): got %q, want %q", tc.listen, got, tc.want)
		}
	}
}

// A node that is not running is reported as "connection refused", even
// when the caller's deadline is short; one that accepts and never answers
// as a timeout.
func TestClientSaysWhyANodeCannotBeReached(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = FetchStatus(ctx, closed)
	var u *Unreachable
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "deadline") {
		t.Errorf("status of a closed port: got %v, want an *Unreachable saying connection refused", err)
	}
	if err := Probe(ctx, closed); !strings.Contains(err.Error(), "cannot reach http://"+closed+": connection refused") {
		t.Errorf("probe of a closed port: got %v", err)
	}

	// Accepts, never answers.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	err = Probe(ctx2, hang.Addr().String())
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "no answer within the timeout") {
		t.Errorf("probe of a node that never answers: got %v, want no answer within the timeout", err)
	}
}

func TestProbe(t *testing.T) {
	var ready error
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return testConfig() }, Ready: func() error { return ready }}))
	defer srv.Close()
	ctx := context.Background()
	if err := Probe(ctx, srv.URL); err != nil {
		t.Errorf("ready node: got %v, want nil", err)
	}
	ready = errors.New("draining: shutting down")
	err := Probe(ctx, srv.URL)
	var e *Error
	if !errors.As(err, &e) || e.Code != http.StatusServiceUnavailable || e.Message != "draining: shutting down" {
		t.Errorf("draining node: got %#v, want *Error 503 with the node's reason", err)
	}
}
