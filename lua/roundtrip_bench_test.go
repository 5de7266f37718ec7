package lua

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// BenchmarkCallRoundTrips prices BENCHMARKS.md's F6 (issue 23): one
// call's admission (admit.lua, a peer and a customer window, both
// admitting) and its carrier slot (pace.lua, a 100 µs interval: every call
// gets a slot), issued at a steady rate as calls arrive, each in its own
// goroutine, through the Pipeliner as the node sends them:
//
//	two-trips:  admit.lua, then pace.lua (the node before F6);
//	admit_pace: both in one script, one round trip (AdmitPace, F6).
//
// Reported per op: the benchmark process's CPU (getrusage; the client
// side, as the node would spend it), redis-server's (INFO cpu) and the
// part of it spent running the scripts (INFO commandstats), and the
// latency of the op's decision (p50, p99). The rate is fixed, so the
// figures are per call at that rate, not at saturation (where the
// Pipeliner's batches grow and hide the per-trip cost):
//
//	go test ./lua/ -run '^$' -bench CallRoundTrips -benchtime 12000x -count 3
func BenchmarkCallRoundTrips(b *testing.B) {
	const rate = 1200 // calls per second, as bench/profile.sh -rate 1200
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	if err := Load(ctx, c); err != nil {
		b.Fatal(err)
	}
	p := NewPipeliner(c, PipelineOptions{})
	defer p.Close()

	run := 0
	call := func(mode string) func(i int) error {
		run++
		peer := AdmitBucket{Key: Key("rt", "peer", fmt.Sprint(run)), Limit: 1 << 20, WindowUS: 1_000_000}
		cust := AdmitBucket{Key: Key("rt", "customer", fmt.Sprint(run)), Limit: 1 << 20, WindowUS: 1_000_000}
		slots := Key("rt", "carrier", fmt.Sprint(run))
		if mode == "two-trips" {
			return func(i int) error {
				m := fmt.Sprint("m", i)
				if _, err := Admit(ctx, p, m, []AdmitBucket{peer, cust}); err != nil {
					return err
				}
				_, err := Pace(ctx, p, slots, m, 100, 2_000_000, 3_000_000, PaceShare{})
				return err
			}
		}
		return func(i int) error {
			m := fmt.Sprint("m", i)
			_, _, paced, err := AdmitPace(ctx, p, m, []AdmitBucket{peer, cust},
				PaceCall{Key: slots, Member: m, IntervalUS: 100, MaxWaitUS: 2_000_000, ClaimUS: 3_000_000})
			if err == nil && !paced {
				err = errors.New("admitted call not paced")
			}
			return err
		}
	}

	for _, mode := range []string{"two-trips", "admit_pace", "two-trips", "admit_pace"} {
		b.Run(mode, func(b *testing.B) {
			op := call(mode)
			lat := make([]time.Duration, b.N)
			errs := make(chan error, 1)
			var wg sync.WaitGroup
			redis0, script0 := redisCPU(b, c), redisScriptTime(b, c)
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			tick := time.NewTicker(time.Second / rate)
			for i := range b.N {
				<-tick.C
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					if err := op(i); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
					lat[i] = time.Since(t0)
				}()
			}
			wg.Wait()
			tick.Stop()
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			redis1, script1 := redisCPU(b, c), redisScriptTime(b, c)
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			cpu := syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) +
				syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime)
			slices.Sort(lat)
			b.ReportMetric(float64(cpu)/1e3/float64(b.N), "client-cpu-µs/op")
			b.ReportMetric((redis1-redis0)*1e6/float64(b.N), "redis-cpu-µs/op")
			b.ReportMetric(float64(script1-script0)/float64(b.N), "redis-script-µs/op")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
		})
	}
}

// redisCPU is redis-server's CPU time so far, in seconds (INFO cpu).
func redisCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); err != nil {
			b.Fatal(err)
		}
		sum += f
	}
	return sum
}

// redisScriptTime is the time redis-server has spent running EVALSHA
// so far, in µs (INFO commandstats): the scripts' own work, without the
// requests' I/O.
func redisScriptTime(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				var n int64
				if _, err := fmt.Sscan(v, &n); err != nil {
					b.Fatal(err)
				}
				return n
			}
		}
	}
	return 0
}
