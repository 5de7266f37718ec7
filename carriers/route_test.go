package carriers

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

func routeConfig() *config.Config {
	car := func(name string, cps float64) config.Carrier {
		return config.Carrier{Name: name, URI: "sip:127.0.0.1:5070", CPS: cps, MaxWait: 5 * time.Second, Probe: &config.Probe{}}
	}
	return &config.Config{Store: config.Store{KeyPrefix: "t"},
		Carriers: []config.Carrier{car("a", 2), car("b", 2), car("c", 2)},
		Routes: map[string]config.Route{
			"ordered": config.OrderedRoute("a", "b", "c"),
			"split":   {Policy: config.RouteWeighted, Carriers: []config.RouteCarrier{{Name: "a", Weight: 70}, {Name: "b", Weight: 30}, {Name: "c"}}},
			"quick":   {Policy: config.RouteLeastWait, Carriers: []config.RouteCarrier{{Name: "a"}, {Name: "b"}, {Name: "c"}}},
		}}
}

// TestOrderWeighted: a weighted route's first carrier is drawn by weight
// among the carriers usable now; the others follow in the route's order;
// a carrier of weight 0 is never first.
func TestOrderWeighted(t *testing.T) {
	cfg := routeConfig()
	s := testSet(t, cfg)
	var draws []int
	s.intN = func(n int) int {
		if n != 100 && n != 30 {
			t.Errorf("drawn among %d, want the usable weights' sum (100, or 30 with a out)", n)
		}
		return draws[0]
	}
	for _, tc := range []struct {
		draw int
		want []string
	}{{0, []string{"a", "b", "c"}}, {69, []string{"a", "b", "c"}}, {70, []string{"b", "a", "c"}}, {99, []string{"b", "a", "c"}}} {
		draws = []int{tc.draw}
		if got := s.Order(context.Background(), cfg, "split"); !slices.Equal(got, tc.want) {
			t.Errorf("draw %d: order %v, want %v", tc.draw, got, tc.want)
		}
	}
	// a out of service: its share goes to the others (b, the only one
	// with weight left).
	if _, _, err := s.TakeOut(context.Background(), "a", "test", ""); err != nil {
		t.Fatal(err)
	}
	draws = []int{0}
	if got := s.Order(context.Background(), cfg, "split"); !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Errorf("a out of service: order %v, want b first", got)
	}
	if got := s.Order(context.Background(), cfg, "ordered"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("ordered route: %v", got)
	}
	if got := s.Order(context.Background(), cfg, "nope"); got != nil {
		t.Errorf("unknown route: %v, want nil", got)
	}
}

// TestOrderLeastWait: a least_wait route's first carrier is the usable
// one whose next free slot is soonest (pacing's queue read), ties to the
// earlier one; the others follow in the route's order.
func TestOrderLeastWait(t *testing.T) {
	cfg := routeConfig()
	slots := pacing.NewLocalSlots(nil)
	s, err := New(Options{Config: func() *config.Config { return cfg }, Pacer: pacing.NewPacer(slots)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got := s.Order(ctx, cfg, "quick"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("all idle: order %v, want the route's order", got)
	}
	fill := func(name string, n int) {
		t.Helper()
		key := policy.Key("t", policy.ScopeCarrier, name)
		for i := range n {
			if sl, err := slots.Reserve(ctx, key, name+string(rune('0'+i)), pacing.Share{}, pacing.Interval(2), time.Minute); err != nil || !sl.OK {
				t.Fatalf("reserve: %+v, %v", sl, err)
			}
		}
	}
	fill("a", 3) // a's next slot 1.5 s away
	fill("b", 1) // b's 0.5 s
	if got := s.Order(ctx, cfg, "quick"); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("a and b busy, c idle: order %v, want c first", got)
	}
	fill("c", 2) // c's 1 s: b is soonest
	if got := s.Order(ctx, cfg, "quick"); !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Errorf("b soonest: order %v, want b first", got)
	}
	// b out of service: the soonest of a and c.
	if _, _, err := s.TakeOut(ctx, "b", "test", ""); err != nil {
		t.Fatal(err)
	}
	if got := s.Order(ctx, cfg, "quick"); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("b out: order %v, want c first", got)
	}
}
