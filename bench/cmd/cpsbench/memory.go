package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/sipbench"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/pacing"
)

func memoryCmd(fs *flag.FlagSet) func(*env) error {
	queued := fs.Int("queued", 10000, "calls to hold queued for slots")
	rate := fs.Float64("rate", 2000, "CPS at which the queued calls are offered")
	return func(e *env) error {
		t := stats.Table{Header: []string{"measure", "run", "value", "unit", "note"}}
		var perCall, rssQ []float64
		for run := 1; run <= e.runs; run++ {
			if e.ctx.Err() != nil {
				return e.ctx.Err()
			}
			idle, full, n, err := queuedRSS(e, run, *queued, *rate)
			if err != nil {
				return fmt.Errorf("run %d: %w", run, err)
			}
			pc := float64(full-idle) / float64(max(n, 1))
			fmt.Printf("  run %d: cpsguard RSS idle %.1f MiB, with %d calls queued %.1f MiB: %.0f B per queued call (load %s)\n",
				run, mib(idle), n, mib(full), pc, load())
			t.Add("cpsguard_rss_idle", run, mib(idle), "MiB", "after start, Redis store")
			t.Add("cpsguard_rss_queued", run, mib(full), "MiB", fmt.Sprintf("%d calls waiting for slots", n))
			t.Add("cpsguard_bytes_per_queued_call", run, pc, "B", "(queued - idle) / queued")
			perCall = append(perCall, pc)
			rssQ = append(rssQ, mib(full))
		}
		t.Add("cpsguard_rss_queued", "median", stats.Median(rssQ), "MiB", "")
		t.Add("cpsguard_bytes_per_queued_call", "median", stats.Median(perCall), "B", "")

		rd, err := procs.StartRedis(e.dir("memory", "redis"))
		if err != nil {
			return err
		}
		defer rd.Stop(2 * time.Second)
		c := redis.NewClient(&redis.Options{Addr: rd.Addr})
		defer c.Close()
		if err := lua.Load(e.ctx, c); err != nil {
			return err
		}
		for _, cps := range []int{100, 10000} {
			adm, slots, err := redisBucketMemory(e.ctx, c, cps)
			if err != nil {
				return err
			}
			fmt.Printf("  Redis, %d CPS: admission bucket %.0f B (%.1f B/entry), carrier slot set %.0f B\n", cps, adm, adm/float64(cps), slots)
			t.Add(fmt.Sprintf("redis_admission_bucket_%dcps", cps), "", adm, "B", fmt.Sprintf("MEMORY USAGE of a full window (%d members of ~40 B)", cps))
			t.Add(fmt.Sprintf("redis_carrier_slots_%dcps", cps), "", slots, "B", "MEMORY USAGE of 1 s of slots")
		}
		fmt.Println()
		t.Print(os.Stdout)
		if err := t.WriteCSV(filepath.Join(e.out, "memory.csv")); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(e.out, "memory.csv"))
		return nil
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// queuedRSS starts cpsguard with a slow carrier and a long max_wait,
// offers `queued` calls and reads its RSS once they all wait for slots.
func queuedRSS(e *env, run, queued int, rate float64) (idle, full int64, n int, err error) {
	dir := e.dir("memory", fmt.Sprintf("run-%d", run))
	sk, err := startSink(e.ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	defer sk.stop()
	sys, err := startCpsguardRedis(e, dir, procs.CpsguardOptions{
		PeerCPS: 100000, CarrierCPS: 1, MaxWait: 4 * time.Hour, Carrier: sk.Addr(),
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer sys.stop()
	time.Sleep(time.Second)
	idle, err = procs.RSS(sys.pid)
	if err != nil {
		return 0, 0, 0, err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = sipbench.RunCaller(ctx, sipbench.CallerOptions{
			Target: sys.addr, Rate: rate, Count: queued, Linger: 2 * time.Minute,
			Prefix: fmt.Sprintf("mem-%d-%d", run, time.Now().UnixNano()%1e6),
		})
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Duration(float64(queued)/rate*float64(time.Second)) + 30*time.Second)
	for time.Now().Before(deadline) {
		q, err := sys.guard.Metric(e.ctx, "cpsguard_pacing_queued", "")
		if os.Getenv("BENCH_DEBUG") != "" {
			fmt.Fprintln(os.Stderr, "queued", q, err)
		}
		// The 1 CPS carrier sends one call a second meanwhile.
		if err == nil && int(q) >= queued*99/100 {
			n = int(q)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n == 0 {
		return idle, 0, 0, fmt.Errorf("the queue never reached %d calls", queued)
	}
	time.Sleep(time.Second) // settle: let the GC run once with everything live
	full, err = procs.RSS(sys.pid)
	return idle, full, n, err
}

// redisBucketMemory fills one admission bucket with a full window at cps
// (cps members) and one carrier slot set with 1 s of slots, and returns
// MEMORY USAGE of each.
func redisBucketMemory(ctx context.Context, c *redis.Client, cps int) (adm, slots float64, err error) {
	limit, window := admission.LimitFor(float64(cps))
	akey := lua.Key("bench", "peer", "mem"+strconv.Itoa(cps))
	skey := lua.Key("bench", "carrier", "mem"+strconv.Itoa(cps))
	interval := lua.Micros(pacing.Interval(float64(cps)))
	sha, psha := lua.SHA(lua.ScriptAdmit), lua.SHA(lua.ScriptPace)
	for i := 0; i < cps; i += 500 {
		p := c.Pipeline()
		for j := i; j < min(i+500, cps); j++ {
			m := member(cps, j)
			p.EvalSha(ctx, sha, []string{akey}, m, limit, lua.Micros(window), 0, lua.OverRefuse)
			p.EvalSha(ctx, psha, []string{skey, lua.PauseKey(skey)}, m+"#0", interval, int64(2*time.Second/time.Microsecond), lua.Micros(2*time.Second+pacing.ProbeClaim))
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, 0, err
		}
	}
	n, _ := c.ZCard(ctx, akey).Result()
	ns, _ := c.ZCard(ctx, skey).Result()
	if int(n) < cps*9/10 || int(ns) < cps*9/10 {
		return 0, 0, fmt.Errorf("filled %d admission / %d slot entries of %d (too slow?)", n, ns, cps)
	}
	a, err := c.MemoryUsage(ctx, akey, 0).Result()
	if err != nil {
		return 0, 0, err
	}
	s, err := c.MemoryUsage(ctx, skey, 0).Result()
	if err != nil {
		return 0, 0, err
	}
	return float64(a) * float64(cps) / float64(n), float64(s) * float64(cps) / float64(ns), nil
}

// member looks like the proxy's: Call-ID "/" top Via branch (~40 bytes).
func member(cps, j int) string {
	return fmt.Sprintf("%08x-%d@192.0.2.10/z9hG4bK-%s", j*2654435761, cps, strings.Repeat("a", 8))
}
