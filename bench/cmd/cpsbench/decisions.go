package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/store"
)

type decResult struct {
	method   string
	callers  int
	run      int
	rate     float64 // decisions per second
	p50, p99 time.Duration
	errors   int64
}

// The bucket every decision goes to: a 100 CPS peer (LimitFor(100)), the
// same as the admission package's benchmarks. Nearly every decision is a
// refusal after the first 100 of each window: trim, count, duplicate check,
// oldest entry for Retry-After.
func decBucket(name string) admission.Bucket {
	limit, window := admission.LimitFor(100)
	return admission.Bucket{Key: lua.Key("bench", "peer", name), Limit: limit, Window: window}
}

func decisionsCmd(fs *flag.FlagSet) func(*env) error {
	seconds := fs.Float64("seconds", 3, "seconds per measurement")
	callersFlag := fs.String("callers", "1,64,256", "concurrent callers")
	timeout := fs.Duration("timeout", 200*time.Millisecond, "store.redis.timeout of the store under test")
	flushers := fs.Int("flushers", 0, "lua.PipelineOptions.Flushers of the pipelined store (0 = the product's default)")
	maxBatch := fs.Int("max-batch", 0, "lua.PipelineOptions.MaxBatch of the pipelined store (0 = the product's default)")
	return func(e *env) error {
		var callers []int
		for _, s := range strings.Split(*callersFlag, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return fmt.Errorf("bad -callers %q", *callersFlag)
			}
			callers = append(callers, n)
		}
		rb, err := tool("redis-benchmark", "redis-tools")
		if err != nil {
			return err
		}
		rd, err := procs.StartRedis(e.dir("decisions", "redis"))
		if err != nil {
			return err
		}
		defer rd.Stop(2 * time.Second)
		// The product's client (store.NewClient: pool 64, timeouts) for the
		// store and for raw EVALSHA; a pool as large as the callers for a
		// second raw ceiling.
		cfgR := &config.Redis{Addrs: []string{rd.Addr}, Timeout: *timeout}
		client, err := store.NewClient(cfgR)
		if err != nil {
			return err
		}
		defer client.Close()
		if err := lua.Load(e.ctx, client); err != nil {
			return err
		}
		// As store.Open builds it: scripts through a lua.Pipeliner.
		pipe := lua.NewPipeliner(client, lua.PipelineOptions{Flushers: *flushers, MaxBatch: *maxBatch})
		defer pipe.Close()
		st := admission.NewRedisStore(client, admission.RedisOptions{Timeout: *timeout, Observe: func(string, time.Duration, error) {}, Pipeline: pipe})
		stDirect := admission.NewRedisStore(client, admission.RedisOptions{Timeout: *timeout, Observe: func(string, time.Duration, error) {}})
		dur := time.Duration(*seconds * float64(time.Second))
		sha := lua.SHA(lua.ScriptAdmit)
		fmt.Printf("decisions: admit.lua on one 100 CPS bucket, %s per measurement, callers %v, Redis %s (private); store = admission.RedisStore on store.NewClient (pool 64, timeout %s) through lua.Pipeliner (flushers %d, max batch %d; 0 = default), as store.Open builds it\n", dur, callers, rd.Addr, *timeout, *flushers, *maxBatch)

		var all []decResult
		for run := 1; run <= e.runs; run++ {
			for _, n := range callers {
				if e.ctx.Err() != nil {
					return e.ctx.Err()
				}
				bStore, bDirect, bRaw, bRawBig := decBucket("store"), decBucket("direct"), decBucket("raw"), decBucket("rawbig")
				big := redis.NewClient(&redis.Options{Addr: rd.Addr, PoolSize: max(n, 64), ContextTimeoutEnabled: true, MaxRetries: -1})
				methods := []struct {
					name string
					fn   func(ctx context.Context, m string) error
				}{
					{"store (RedisStore.Admit)", func(ctx context.Context, m string) error {
						_, err := st.Admit(ctx, m, []admission.Bucket{bStore})
						return err
					}},
					{"store, no pipeliner", func(ctx context.Context, m string) error {
						_, err := stDirect.Admit(ctx, m, []admission.Bucket{bDirect})
						return err
					}},
					{"raw go-redis EVALSHA (same client)", func(ctx context.Context, m string) error {
						return client.EvalSha(ctx, sha, []string{bRaw.Key}, m, bRaw.Limit, lua.Micros(bRaw.Window), 0, lua.OverRefuse).Err()
					}},
					{"raw go-redis EVALSHA (pool = callers)", func(ctx context.Context, m string) error {
						return big.EvalSha(ctx, sha, []string{bRawBig.Key}, m, bRawBig.Limit, lua.Micros(bRawBig.Window), 0, lua.OverRefuse).Err()
					}},
				}
				for _, m := range methods {
					r := goDecisions(e.ctx, m.fn, n, dur)
					r.method, r.callers, r.run = m.name, n, run
					all = append(all, r)
					fmt.Printf("  run %d callers %3d %-40s %9.0f /s p50 %s p99 %s ms errors %d (load %s)\n", run, n, m.name, r.rate, stats.Ms(r.p50), stats.Ms(r.p99), r.errors, load())
				}
				big.Close()
				for _, p := range []int{1, 16} {
					b := decBucket(fmt.Sprintf("rb%d", p))
					r, err := redisBenchmark(e, rb, rd.Addr, n, p, dur, sha, b)
					if err != nil {
						return err
					}
					r.run = run
					all = append(all, r)
					fmt.Printf("  run %d callers %3d %-40s %9.0f /s p50 %s p99 %s ms (load %s)\n", run, n, r.method, r.rate, stats.Ms(r.p50), stats.Ms(r.p99), load())
				}
			}
		}
		t := stats.Table{Header: []string{"callers", "method", "run", "decisions_per_s", "p50_ms", "p99_ms", "errors"}}
		for _, r := range all {
			t.Add(r.callers, r.method, r.run, r.rate, r.p50, r.p99, r.errors)
		}
		if err := t.WriteCSV(filepath.Join(e.out, "decisions-runs.csv")); err != nil {
			return err
		}
		sum := stats.Table{Header: []string{"callers", "method", "median_decisions_per_s", "median_p50_ms", "median_p99_ms", "x_raw_same_client", "x_redis_benchmark_P16"}}
		type key struct {
			n int
			m string
		}
		var order []key
		med := map[key][3]float64{}
		for _, r := range all {
			k := key{r.callers, r.method}
			if _, ok := med[k]; !ok {
				order = append(order, k)
				var rs, p50, p99 []float64
				for _, x := range all {
					if x.callers == r.callers && x.method == r.method {
						rs, p50, p99 = append(rs, x.rate), append(p50, float64(x.p50)), append(p99, float64(x.p99))
					}
				}
				med[k] = [3]float64{stats.Median(rs), stats.Median(p50), stats.Median(p99)}
			}
		}
		for _, k := range order {
			m := med[k]
			raw := med[key{k.n, "raw go-redis EVALSHA (same client)"}][0]
			p16 := med[key{k.n, "redis-benchmark -P 16"}][0]
			sum.Add(k.n, k.m, m[0], time.Duration(m[1]), time.Duration(m[2]), m[0]/raw, m[0]/p16)
		}
		fmt.Println()
		sum.Print(os.Stdout)
		if err := sum.WriteCSV(filepath.Join(e.out, "decisions.csv")); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(e.out, "decisions.csv"), "and decisions-runs.csv")
		return nil
	}
}

// goDecisions runs fn from n goroutines for d and measures every call.
func goDecisions(ctx context.Context, fn func(context.Context, string) error, n int, d time.Duration) decResult {
	var (
		wg     sync.WaitGroup
		errs   atomic.Int64
		mu     sync.Mutex
		lat    []time.Duration
		count  int64
		seq    atomic.Int64
		prefix = strconv.FormatInt(time.Now().UnixNano(), 36)
	)
	// Warm the pool.
	for i := 0; i < n && i < 64; i++ {
		_ = fn(ctx, prefix+"-warm-"+strconv.Itoa(i))
	}
	deadline := time.Now().Add(d)
	start := time.Now()
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			g := seq.Add(1)
			buf := make([]byte, 0, 64)
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(deadline) || ctx.Err() != nil {
					break
				}
				buf = append(buf[:0], prefix...)
				buf = append(buf, '-')
				buf = strconv.AppendInt(buf, g, 10)
				buf = append(buf, '-')
				buf = strconv.AppendInt(buf, int64(i), 10)
				if err := fn(ctx, string(buf)); err != nil {
					errs.Add(1)
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			count += int64(len(local))
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return decResult{rate: float64(count) / el.Seconds(), p50: stats.Pct(lat, 50), p99: stats.Pct(lat, 99), errors: errs.Load()}
}

// redisBenchmark runs redis-benchmark with the same script and arguments:
// EVALSHA sha 1 key <random member> limit window_us 0. A short calibration
// sizes -n so the measurement lasts about d.
func redisBenchmark(e *env, bin, addr string, clients, pipeline int, d time.Duration, sha string, b admission.Bucket) (decResult, error) {
	host, port, _ := strings.Cut(addr, ":")
	run := func(n int) (decResult, error) {
		args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(n),
			"-P", strconv.Itoa(pipeline), "-r", "1000000000", "--csv",
			"EVALSHA", sha, "1", b.Key, "__rand_int__", strconv.Itoa(b.Limit), strconv.FormatInt(lua.Micros(b.Window), 10), "0"}
		ctx, cancel := context.WithTimeout(e.ctx, d*5+30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			return decResult{}, fmt.Errorf("redis-benchmark %v: %w", args, err)
		}
		recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
		if err != nil || len(recs) < 2 || len(recs[1]) < 7 {
			return decResult{}, fmt.Errorf("redis-benchmark: unexpected output %q", out)
		}
		f := func(i int) float64 { v, _ := strconv.ParseFloat(recs[1][i], 64); return v }
		return decResult{
			method: "redis-benchmark -P " + strconv.Itoa(pipeline), callers: clients,
			rate: f(1), p50: time.Duration(f(4) * 1e6), p99: time.Duration(f(6) * 1e6),
		}, nil
	}
	cal, err := run(max(2000, clients*pipeline*20))
	if err != nil {
		return cal, err
	}
	n := int(cal.rate * d.Seconds())
	if n < clients*pipeline*10 {
		n = clients * pipeline * 10
	}
	return run(n)
}
