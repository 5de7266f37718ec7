package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
)

// fakeLive answers List from a fixed list and EndCall for known ids.
type fakeLive struct {
	all   []calls.Live
	ended []string
}

func (f *fakeLive) List(_ context.Context, flt calls.Filter) calls.Listing {
	out := calls.Listing{Calls: []calls.Live{}}
	for _, l := range f.all {
		if (flt.Peer == "" || l.Peer == flt.Peer) && (flt.Carrier == "" || l.Carrier == flt.Carrier) {
			out.Calls = append(out.Calls, l)
		}
	}
	return out
}

func (f *fakeLive) EndCall(_ context.Context, id string) (calls.EndResult, error) {
	for _, l := range f.all {
		if l.CallID == id {
			f.ended = append(f.ended, id)
			return calls.EndResult{CallID: id, Ended: 1}, nil
		}
	}
	return calls.EndResult{}, calls.ErrNoCall
}

func TestCallsAPI(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ans := t0.Add(3 * time.Second)
	fl := &fakeLive{all: []calls.Live{
		{ID: "1", CallID: "a/b@host", Peer: "p1", Customer: "acme", Carrier: "c1", Node: "n1", StartedAt: t0, AnsweredAt: &ans},
		{ID: "2", CallID: "x", Peer: "p2", Carrier: "c2", Node: "n2", StartedAt: t0},
	}}
	cfg := testConfig()
	cfg.HTTP.Token = "s3cret"
	cfg.Peers = append(cfg.Peers, config.Peer{Name: "p1"}, config.Peer{Name: "p2"})
	cfg.Carriers = append(cfg.Carriers, config.Carrier{Name: "c1"}, config.Carrier{Name: "c2"})
	var cur atomic.Pointer[config.Config]
	cur.Store(cfg)
	srv := httptest.NewServer(New(Options{Config: cur.Load, LiveCalls: fl}))
	defer srv.Close()
	ctx := context.Background()

	for _, tc := range []struct{ peer, carrier, want string }{
		{"", "", "a/b@host x"}, {"p1", "", "a/b@host"}, {"", "c2", "x"}, {"p1", "c2", ""},
	} {
		l, err := FetchCalls(ctx, srv.URL, tc.peer, tc.carrier)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range l.Calls {
			ids = append(ids, c.CallID)
		}
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("peer %q carrier %q: got %q, want %q", tc.peer, tc.carrier, got, tc.want)
		}
	}
	// A name the configuration does not have, with no call, is a 404
	// that says so (a misspelt filter read as "no call": h68); a removed
	// peer's calls still live are listed.
	for _, tc := range []struct{ peer, carrier, want string }{
		{"p3", "", `no peer named "p3"`}, {"", "c3", `no carrier named "c3"`}, {"p1", "c3", `no carrier named "c3"`},
	} {
		_, err := FetchCalls(ctx, srv.URL, tc.peer, tc.carrier)
		if e, ok := err.(*Error); !ok || e.Code != http.StatusNotFound || !strings.Contains(e.Message, tc.want) {
			t.Errorf("peer %q carrier %q: got %v, want a 404 saying %s", tc.peer, tc.carrier, err, tc.want)
		}
	}
	reloaded := *cfg // p2 removed by a reload, its call still up
	reloaded.Peers = slices.Clone(cfg.Peers[:len(cfg.Peers)-1])
	cur.Store(&reloaded)
	if l, err := FetchCalls(ctx, srv.URL, "p2", ""); err != nil || len(l.Calls) != 1 {
		t.Errorf("a removed peer's live call: got %+v, %v; want it listed", l, err)
	}

	// The JSON names of the contract.
	resp, err := http.Get(srv.URL + PathCalls)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Calls []map[string]any `json:"calls"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	for _, k := range []string{"call_id", "peer", "customer", "carrier", "node", "started_at", "answered_at"} {
		if _, ok := raw.Calls[0][k]; !ok {
			t.Errorf("a listed call has no %q: %v", k, raw.Calls[0])
		}
	}

	// Ending needs the token; the Call-ID travels escaped in the path.
	if _, err := EndCall(ctx, srv.URL, "", "a/b@host"); err == nil || err.(*Error).Code != http.StatusUnauthorized {
		t.Fatalf("end without token: got %v, want 401", err)
	}
	res, err := EndCall(ctx, srv.URL, "s3cret", "a/b@host")
	if err != nil || res.Ended != 1 || len(fl.ended) != 1 || fl.ended[0] != "a/b@host" {
		t.Fatalf("end: got %+v, %v (ended %v)", res, err, fl.ended)
	}
	if _, err := EndCall(ctx, srv.URL, "s3cret", "nope"); err == nil || err.(*Error).Code != http.StatusNotFound {
		t.Fatalf("end of an unknown call: got %v, want 404", err)
	}

	var b bytes.Buffer
	l, _ := FetchCalls(ctx, srv.URL, "", "")
	RenderCalls(&b, l, ans.Add(time.Minute))
	out := b.String()
	for _, want := range []string{"CALL-ID", "a/b@host", "acme", "1m0s", "2 live call(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestCallsAPINotWired(t *testing.T) {
	h := New(Options{Config: testConfig})
	if rec := do(t, h, http.MethodGet, PathCalls, nil); rec.Code != http.StatusNotImplemented {
		t.Errorf("GET without LiveCalls: %d, want 501", rec.Code)
	}
}

// blockingLive holds every List until release is closed.
type blockingLive struct {
	fakeLive
	entered chan struct{}
	release chan struct{}
}

func (b *blockingLive) List(ctx context.Context, f calls.Filter) calls.Listing {
	b.entered <- struct{}{}
	<-b.release
	return b.fakeLive.List(ctx, f)
}

// One listing of the live calls runs at a time: a GET while another runs
// gets 429 with Retry-After at once, and the next one after it is served.
func TestCallsListOneAtATime(t *testing.T) {
	bl := &blockingLive{entered: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := testConfig()
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return cfg }, LiveCalls: bl}))
	defer srv.Close()
	first := make(chan int, 1)
	go func() {
		res, err := http.Get(srv.URL + PathCalls)
		if err != nil {
			first <- 0
			return
		}
		res.Body.Close()
		first <- res.StatusCode
	}()
	select {
	case <-bl.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first listing never started")
	}
	res, err := http.Get(srv.URL + PathCalls)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("a listing while another runs: %d, Retry-After %q; want 429, 1", res.StatusCode, res.Header.Get("Retry-After"))
	}
	close(bl.release)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the first listing: %d, want 200", code)
	}
	go func() { <-bl.entered }()
	res, err = http.Get(srv.URL + PathCalls)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a listing after the first ended: %d, want 200", res.StatusCode)
	}
}

// signalLive tells listed when each List has returned.
type signalLive struct {
	fakeLive
	listed chan struct{}
}

func (s *signalLive) List(ctx context.Context, f calls.Filter) calls.Listing {
	l := s.fakeLive.List(ctx, f)
	s.listed <- struct{}{}
	return l
}

// A client that asks for the list and does not read the answer does not
// keep the other listings out: the one-at-a-time bound is on the listing
// (the reads of the store and the copy), not on a write that lasts as
// long as the client likes (up to the server's WriteTimeout, 30 s, and
// again with its next request: the reads need no token).
func TestCallsListNotHeldByASlowReader(t *testing.T) {
	// An answer far larger than the sockets' buffers.
	long := strings.Repeat("x", 8<<10)
	sl := &signalLive{listed: make(chan struct{}, 16)}
	for i := range 2000 {
		sl.all = append(sl.all, calls.Live{ID: strconv.Itoa(i), CallID: long + strconv.Itoa(i), Peer: "p", Carrier: "c"})
	}
	cfg := testConfig()
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return cfg }, LiveCalls: sl}))
	defer srv.Close()
	slow, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close() // first: the handler's write to it then fails
	_ = slow.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := slow.Write([]byte("GET " + PathCalls + " HTTP/1.1\r\nHost: cpsguard\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sl.listed:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow reader's listing never ran")
	}
	got := 0
	for try := 0; try < 100 && got != http.StatusOK; try++ {
		if try > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		res, err := http.Get(srv.URL + PathCalls)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got = res.StatusCode
	}
	if got != http.StatusOK {
		t.Fatalf("a listing while a client does not read its own: %d, want 200", got)
	}
}
