package policy

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/lua"
)

func testConfig() *config.Config {
	return &config.Config{
		Store:     config.Store{KeyPrefix: "t"},
		Peers:     []config.Peer{{Name: "dialer-1", CPS: 50, Windows: []config.Window{{Calls: 600, Per: time.Minute}}}},
		Customers: []config.Customer{{Name: "acme", CPS: 0.5}, {Name: "none"}},
		Carriers: []config.Carrier{
			{Name: "a", URI: "sip:127.0.0.1:5070", CPS: 10, MaxWait: time.Second},
			{Name: "b", URI: "sip:[::1];transport=tcp", CPS: 10},
			{Name: "c", URI: "sip:carrier.example", CPS: 10},
			{Name: "d", URI: "sips:carrier.example", CPS: 10},
			{Name: "e", URI: "sip:127.0.0.1:5071;transport=tls", CPS: 10},
			{Name: "bad", URI: "sip:", CPS: 10},
		},
	}
}

// oldBuckets is how sip built a scope's buckets per call before Policy.
func oldBuckets(prefix, scope, name string, cps float64, burst int, windows []config.Window) []admission.Bucket {
	key := lua.Key(prefix, scope, name)
	var out []admission.Bucket
	if burst > 0 {
		out = append(out, admission.TokenBucket(key, cps, burst))
	} else {
		limit, window := admission.LimitFor(cps)
		out = append(out, admission.Bucket{Key: key, Limit: limit, Window: window})
	}
	for _, w := range windows {
		out = append(out, admission.WindowBucket(key, w.Calls, w.Per))
	}
	return out
}

func TestBucketsAsBuiltPerCall(t *testing.T) {
	cfg := testConfig()
	p := New(cfg)
	pe := p.Peer(&cfg.Peers[0])
	cu := p.Customer(&cfg.Customers[0])
	for _, tc := range []struct {
		name  string
		s     *Scoped
		cps   float64
		burst int
	}{
		{"peer configured", pe, 50, 0},
		{"peer override", pe, 20, 0},
		{"peer override burst", pe, 20, 40},
		{"customer below 1 cps", cu, 0.5, 0},
		{"customer override", cu, 3, 5},
	} {
		got := tc.s.Buckets(tc.cps, tc.burst)
		want := oldBuckets("t", string(tc.s.Scope), tc.s.Name, tc.cps, tc.burst, cfg.Peers[0].Windows)
		if tc.s.Scope == ScopeCustomer {
			want = oldBuckets("t", string(tc.s.Scope), tc.s.Name, tc.cps, tc.burst, nil)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}
	if got := p.Customer(&cfg.Customers[1]).Buckets(0, 0); len(got) != 0 {
		t.Errorf("no cps and no windows: got %+v, want no bucket", got)
	}
}

// TestFractionalWindowLiterals: the 1 s window of a fractional cps, in
// literal values (TestBucketsAsBuiltPerCall computes its expectation with
// admission.LimitFor and cannot see a change of rounding).
func TestFractionalWindowLiterals(t *testing.T) {
	cfg := testConfig()
	cfg.Peers[0].CPS = 2.5
	p := New(cfg)
	pe := p.Peer(&cfg.Peers[0])
	for _, tc := range []struct {
		name       string
		b          admission.Bucket
		wantLimit  int
		wantWindow time.Duration
	}{
		{"configured 2.5", pe.Buckets(pe.CPS, 0)[0], 2, 1010 * time.Millisecond},
		{"override 7.9", pe.Buckets(7.9, 0)[0], 7, 1010 * time.Millisecond},
		{"window 1.5", pe.Window(1.5), 1, 1010 * time.Millisecond},
		{"window 0.5", pe.Window(0.5), 1, 2010 * time.Millisecond},
	} {
		if tc.b.Limit != tc.wantLimit || tc.b.Window != tc.wantWindow {
			t.Errorf("%s: got %d per %v, want %d per %v", tc.name, tc.b.Limit, tc.b.Window, tc.wantLimit, tc.wantWindow)
		}
	}
}

func TestConfiguredBucketsDoNotAllocate(t *testing.T) {
	cfg := testConfig()
	var c Cache
	c.Of(cfg)
	n := testing.AllocsPerRun(100, func() {
		p := c.Of(cfg)
		pe := p.Peer(&cfg.Peers[0])
		_ = pe.Buckets(pe.CPS, pe.Burst)
		_ = p.Carrier(&cfg.Carriers[0]).Pacing(10)
	})
	if n != 0 {
		t.Errorf("got %v allocations per call, want 0", n)
	}
}

func TestEditedInPlaceIsDerivedAfresh(t *testing.T) {
	cfg := testConfig()
	p := New(cfg)
	cfg.Peers[0].CPS = 7
	cfg.Carriers[0].URI = "sip:127.0.0.9:5080"
	if got := p.Peer(&cfg.Peers[0]).Buckets(7, 0)[0].Limit; got != 7 {
		t.Errorf("peer edited in place: got limit %d, want 7", got)
	}
	if got := p.Carrier(&cfg.Carriers[0]).Target.HostPort; got != "127.0.0.9:5080" {
		t.Errorf("carrier edited in place: got %q, want 127.0.0.9:5080", got)
	}
	other := config.Peer{Name: "x", CPS: 1}
	if got := p.Peer(&other).Key; got != "t:{peer:x}" {
		t.Errorf("peer of another snapshot: got %q, want t:{peer:x}", got)
	}
}

func TestCarriers(t *testing.T) {
	cfg := testConfig()
	p := New(cfg)
	for _, tc := range []struct {
		name string
		want Target
		err  bool
	}{
		{"a", Target{Host: "127.0.0.1", Port: 5070, PortGiven: true, Transport: "UDP", HostPort: "127.0.0.1:5070"}, false},
		{"b", Target{Host: "[::1]", Port: 5060, Transport: "TCP", HostPort: "[::1]:5060"}, false},
		{"c", Target{Host: "carrier.example", Port: 5060, Transport: "UDP", HostPort: "carrier.example:5060"}, false},
		{"d", Target{Host: "carrier.example", Port: 5061, Transport: "TLS", HostPort: "carrier.example:5061"}, false},
		{"e", Target{Host: "127.0.0.1", Port: 5071, PortGiven: true, Transport: "TLS", HostPort: "127.0.0.1:5071"}, false},
		{"bad", Target{}, true},
	} {
		c := p.Carrier(cfg.Carrier(tc.name))
		if (c.Err != nil) != tc.err {
			t.Errorf("%s: got error %v, want error %v", tc.name, c.Err, tc.err)
		}
		if c.Target != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, c.Target, tc.want)
		}
	}
	if pc := p.Carrier(&cfg.Carriers[0]).Pacing(4); pc.CPS != 4 || pc.MaxWait != time.Second {
		t.Errorf("pacing: got %+v, want cps 4, max_wait 1s", pc)
	}
	want := map[netip.Addr]struct{}{netip.MustParseAddr("127.0.0.1"): {}, netip.MustParseAddr("::1"): {}}
	if got := p.CarrierIPs(); !reflect.DeepEqual(got, want) {
		t.Errorf("carrier IPs: got %v, want %v", got, want)
	}
}

func TestCache(t *testing.T) {
	var c Cache
	if c.Of(nil) != nil {
		t.Fatal("nil config: got a Policy")
	}
	a, b := testConfig(), testConfig()
	pa := c.Of(a)
	if c.Of(a) != pa {
		t.Error("same snapshot: derived again")
	}
	pb := c.Of(b)
	if pb == pa || pb.Config() != b {
		t.Error("new snapshot: got the old Policy")
	}
	if c.Of(a) != pa || c.Of(b) != pb {
		t.Error("previous snapshot: derived again")
	}
	if pc := c.Of(testConfig()); pc == pa || pc == pb {
		t.Error("third snapshot: got an old Policy")
	}
	if c.Of(b) != pb {
		t.Error("previous snapshot after a third: derived again")
	}
}

// sink keeps the benchmarks' results alive.
var sink struct {
	buckets []admission.Bucket
	ids     []string
	key     string
}

// BenchmarkPerCall compares what sip did per INVITE before Policy (build
// the peer's and customer's bucket keys, extra window keys and gate names,
// and the carrier's slot and max_calls keys) with the lookups in a derived
// Policy. Both append into the same kind of slices, as sip does.
//
//	go test -run '^$' -bench PerCall -benchmem ./policy
func BenchmarkPerCall(b *testing.B) {
	cfg := testConfig()
	pe, cu, car := &cfg.Peers[0], &cfg.Customers[0], &cfg.Carriers[0]
	b.Run("built", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bs := oldBuckets("t", "peer", pe.Name, pe.CPS, pe.Burst, pe.Windows)
			bs = append(bs, oldBuckets("t", "customer", cu.Name, cu.CPS, cu.Burst, cu.Windows)...)
			sink.buckets = bs
			sink.ids = append(sink.ids[:0], "peer"+":"+pe.Name, "customer"+":"+cu.Name)
			sink.key = lua.Key("t", "carrier", car.Name)
			sink.key = lua.Key("t", "calls:"+"carrier", car.Name)
		}
	})
	p := New(cfg)
	b.Run("derived", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, c := p.Peer(pe), p.Customer(cu)
			bs := append([]admission.Bucket(nil), s.Buckets(s.CPS, s.Burst)...)
			bs = append(bs, c.Buckets(c.CPS, c.Burst)...)
			sink.buckets = bs
			sink.ids = append(sink.ids[:0], s.ID, c.ID)
			sink.key = p.Carrier(car).Pacing(10).Key
			sink.key = p.Carrier(car).CallsKey
		}
	})
}
