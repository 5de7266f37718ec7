package pacing

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/lua"
)

// fairRun is what one customer's calls got in a fair-share benchmark run.
type fairRun struct {
	mu      sync.Mutex
	waits   []time.Duration // Ticket.Wait of the calls let through
	taken   []time.Duration // the time each spent in Acquire
	sent    []time.Time
	refused int
}

func (r *fairRun) pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)]
}

// offer runs calls of c on p at rate per second for d (evenly spaced, or
// Poisson when poisson), each in its own goroutine like the proxy's, and
// records what they got.
func offer(p *Pacer, c Carrier, name string, rate float64, d time.Duration, poisson bool, seed int64, r *fairRun) *sync.WaitGroup {
	var wg sync.WaitGroup
	rng := rand.New(rand.NewSource(seed))
	gate := GateKey{Key: "carrier:" + c.Key, CPS: c.CPS}
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		at := time.Duration(0)
		for i := 0; at < d; i++ {
			time.Sleep(time.Until(start.Add(at)))
			wg.Add(1)
			go func(member string) {
				defer wg.Done()
				t0 := time.Now()
				tk, err := p.Acquire(context.Background(), c, member, nil, gate)
				now := time.Now()
				r.mu.Lock()
				defer r.mu.Unlock()
				switch {
				case err != nil:
					panic(err)
				case !tk.OK:
					r.refused++
				default:
					tk.Sent(now)
					r.waits = append(r.waits, tk.Wait)
					r.taken = append(r.taken, now.Sub(t0))
					r.sent = append(r.sent, now)
				}
			}(fmt.Sprintf("%s-%d", name, i))
			if poisson {
				at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			} else {
				at += time.Duration(float64(time.Second) / rate)
			}
		}
	}()
	return &wg
}

// BenchmarkFairShare: one 50 CPS carrier (max_wait 2 s) on Redis, the real
// Pacer on the real clock. A steady customer offers 24 CPS, evenly spaced
// (its half of the carrier is 24.75: the carrier paces at 50 / 1.01); a
// second customer, same weight, bursts at 250 CPS (Poisson), ten times its
// share. For the steady one, the granted waits (Ticket.Wait) and the time
// spent in Acquire (round trips and timer lateness included), p50 and p99,
// and its refusals; for the burst, the calls let through per second; for
// the carrier, the most sends in any rolling second. Three runs each:
//
//	alone:           the steady customer with the carrier to itself;
//	share_by=customer: both, shared by customer;
//	share_by=none:   both, first come, first served (the default).
//
// Each run lasts fairSeconds; run with -benchtime 1x:
//
//	go test ./pacing/ -run '^$' -bench BenchmarkFairShare -benchtime 1x
func BenchmarkFairShare(b *testing.B) {
	const cps, steadyRate, burstRate, fairSeconds = 50, 24, 250, 10
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { _ = c.Close() })
	store := NewRedisSlots(c, RedisOptions{Timeout: time.Second})
	if err := store.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, sc := range []struct {
		name         string
		burst, share bool
	}{
		{"alone", false, true},
		{"share_by=customer", true, true},
		{"share_by=none", true, false},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for i := range b.N {
				p := NewPacer(store)
				key := lua.Key("bench", "carrier", fmt.Sprintf("%s-%d-%d", sc.name, i, time.Now().UnixNano()))
				steady := Carrier{Key: key, CPS: cps, MaxWait: 2 * time.Second}
				burst := steady
				if sc.share {
					steady.Share = Share{Name: "customer:steady", Weight: 1}
					burst.Share = Share{Name: "customer:burst", Weight: 1}
				}
				var s, bu fairRun
				d := fairSeconds * time.Second
				wb := &sync.WaitGroup{}
				if sc.burst {
					wb = offer(p, burst, "burst", burstRate, d, true, int64(i+1), &bu)
				}
				ws := offer(p, steady, "steady", steadyRate, d, false, 0, &s)
				ws.Wait()
				wb.Wait()
				all := append(slices.Clone(s.sent), bu.sent...)
				slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(ms(s.pct(s.waits, .5)), "steady_wait_p50_ms")
				b.ReportMetric(ms(s.pct(s.waits, .99)), "steady_wait_p99_ms")
				b.ReportMetric(ms(s.pct(s.taken, .5)), "steady_acquire_p50_ms")
				b.ReportMetric(ms(s.pct(s.taken, .99)), "steady_acquire_p99_ms")
				b.ReportMetric(float64(s.refused), "steady_refused")
				b.ReportMetric(float64(len(s.sent)), "steady_sent")
				b.ReportMetric(float64(len(bu.sent))/fairSeconds, "burst_sent/s")
				b.ReportMetric(float64(siptest.MaxInWindow(all, time.Second)), "max_in_1s")
			}
		})
	}
}
