package carriers

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// BenchmarkRoutePolicyWait: calls arriving at 15 cps on a route of two
// carriers of 10 cps each (max_wait 1 s), on a simulated clock (the slot
// store's; no sleeping): the pacing wait each call is granted under the
// route's policy, and the share refused (no slot within max_wait on any
// carrier). Ordered fills the first carrier's queue up to max_wait before
// the second takes a call; least_wait keeps both queues short; weighted
// 50/50 splits blindly.
//
//	go test -run '^$' -bench RoutePolicyWait -benchtime 20000x ./carriers/
func BenchmarkRoutePolicyWait(b *testing.B) {
	for _, pol := range []string{config.RouteOrdered, config.RouteWeighted, config.RouteLeastWait} {
		b.Run(pol, func(b *testing.B) {
			var mu sync.Mutex
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			cfg := &config.Config{Store: config.Store{KeyPrefix: "b"}, Carriers: []config.Carrier{
				{Name: "a", URI: "sip:127.0.0.1:5070", CPS: 10, MaxWait: time.Second, Probe: &config.Probe{}},
				{Name: "b", URI: "sip:127.0.0.1:5071", CPS: 10, MaxWait: time.Second, Probe: &config.Probe{}},
			}, Routes: map[string]config.Route{"r": {Policy: pol, Carriers: []config.RouteCarrier{{Name: "a", Weight: 50}, {Name: "b", Weight: 50}}}}}
			if pol != config.RouteWeighted {
				cfg.Routes["r"] = config.Route{Policy: pol, Carriers: []config.RouteCarrier{{Name: "a"}, {Name: "b"}}}
			}
			pacer := pacing.NewPacerClock(pacing.NewLocalSlots(clock), simClock{clock})
			s, err := New(Options{Config: func() *config.Config { return cfg }, Pacer: pacer, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var waited time.Duration
			var worst time.Duration
			refused := 0
			b.ResetTimer()
			for i := range b.N {
				mu.Lock()
				now = now.Add(time.Second / 15)
				mu.Unlock()
				ok := false
				for _, name := range s.Order(ctx, cfg, "r") {
					pc, _ := s.Pacing(cfg, cfg.Carrier(name))
					sl, err := pacer.Reserve(ctx, pc, "call-"+strconv.Itoa(i))
					if err != nil {
						b.Fatal(err)
					}
					if sl.OK {
						waited += sl.Wait
						worst = max(worst, sl.Wait)
						ok = true
						break
					}
				}
				if !ok {
					refused++
				}
			}
			b.ReportMetric(float64(waited.Milliseconds())/float64(max(b.N-refused, 1)), "wait-ms/call")
			b.ReportMetric(float64(worst.Milliseconds()), "max-wait-ms")
			b.ReportMetric(100*float64(refused)/float64(b.N), "%refused")
		})
	}
}

// simClock is a pacing.Clock on a simulated time that never sleeps.
type simClock struct{ now func() time.Time }

func (c simClock) Now() time.Time                                 { return c.now() }
func (simClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
