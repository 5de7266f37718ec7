package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/sipbench"
)

// profileCmd profiles the per-call path under load: a benchmark build of
// the node with net/http/pprof (cmd/cpsguard built with -tags cpsguardprof,
// see bench/profile.sh) on Redis, SIPp at
// a fixed rate with non-binding limits; CPU and allocation profiles over
// the middle of the run; then a heap profile with calls queued for slots.
// answeredLinger is how long, in seconds, the node keeps an answered
// call's INVITE transactions after its 2xx (sip/proxy.go's answeredLinger:
// sipgo's Timers L and M), the calls whose messages the live heap holds.
const answeredLinger = 8

func profileCmd(fs *flag.FlagSet) func(*env) error {
	rate := fs.Int("rate", 2000, "CPS offered (SIPp)")
	seconds := fs.Int("seconds", 20, "seconds of load")
	window := fs.Int("window", 10, "seconds profiled (from 4 s in; under 30, the node's HTTP write timeout)")
	queued := fs.Int("queued", 10000, "calls queued for the heap profile (0 = skip)")
	bin := fs.String("prof-bin", "bench/out/bin/cpsguard-prof", "profiling build of the node (go build -tags cpsguardprof ./cmd/cpsguard)")
	return func(e *env) error {
		if 4+*window > *seconds {
			// Per call means per call decided inside the window: a window
			// that outlasts the load would divide its CPU among calls that
			// were not there (session 9's figure was 1.6x too low so).
			return fmt.Errorf("profile: -window %d from 4 s in outlasts -seconds %d of load", *window, *seconds)
		}
		pbin, _ := filepath.Abs(*bin)
		dir := e.dir("profile")
		uasPort := procs.FreeUDP()
		dest := "127.0.0.1:" + strconv.Itoa(uasPort)
		e2 := *e
		e2.cpsguard = pbin
		sys, err := startCpsguardRedis(&e2, filepath.Join(dir, "node"), procs.CpsguardOptions{
			PeerCPS: 100000, CarrierCPS: 100000, MaxWait: time.Second, Carrier: dest,
		})
		if err != nil {
			return err
		}
		defer sys.stop()
		base := "http://" + sys.guard.HTTP + "/debug/pprof/"
		type res struct {
			uac, uas sippResult
			err      error
		}
		done := make(chan res, 1)
		go func() {
			u, s, err := sippStep(e, filepath.Join(dir, "sipp"), sys.addr, uasPort, *rate, *seconds)
			done <- res{u, s, err}
		}()
		time.Sleep(4 * time.Second)
		if err := fetch(e.ctx, base+"allocs", filepath.Join(dir, "allocs-0.pb.gz")); err != nil {
			return err
		}
		cpu0, rcpu0 := treeCPU(sys), redisCPU(sys)
		calls0, err := sys.guard.Metric(e.ctx, "cpsguard_calls_total", "")
		if err != nil {
			return err
		}
		resetRedisStats(e.ctx, sys)
		if err := fetch(e.ctx, base+"profile?seconds="+strconv.Itoa(*window), filepath.Join(dir, "cpu.pb.gz")); err != nil {
			return err
		}
		cpu, rcpu := treeCPU(sys)-cpu0, redisCPU(sys)-rcpu0
		calls1, err := sys.guard.Metric(e.ctx, "cpsguard_calls_total", "")
		if err != nil {
			return err
		}
		calls := calls1 - calls0 // new calls the node decided in the window
		cmdstats := redisCommandStats(e.ctx, sys)
		if err := fetch(e.ctx, base+"allocs", filepath.Join(dir, "allocs-1.pb.gz")); err != nil {
			return err
		}
		// Memory under load, after the CPU window (the forced collection
		// would distort it): the process's RSS, then the heap a collection
		// leaves live (heap?gc=1): what the node holds per call at this
		// rate, its answered calls' transactions included.
		rssLoad, _ := procs.RSS(sys.pid)
		if err := fetch(e.ctx, base+"heap?gc=1", filepath.Join(dir, "heap-load.pb.gz")); err != nil {
			return err
		}
		live, err := sys.guard.Metric(e.ctx, "go_memstats_heap_alloc_bytes", "")
		if err != nil {
			return err
		}
		r := <-done
		if r.err != nil {
			return r.err
		}
		// The node's own view of the run (store latency, pacing waits,
		// outcomes), for a step that was not clean.
		if err := os.WriteFile(filepath.Join(dir, "metrics.txt"), []byte(sys.guard.Scrape()), 0o644); err != nil {
			return err
		}
		fmt.Printf("profile: %d CPS for %d s through cpsguard-prof (Redis); SIPp ok %d failed %d retrans %d; node+redis CPU %.2f s in the %d s window, %.0f calls decided in it (%.0f µs per call)\n",
			*rate, *seconds, r.uac.ok, r.uac.failed, r.uac.retrans, cpu, *window, calls, cpu/calls*1e6)
		fmt.Printf("of which the node %.0f µs and redis-server %.0f µs per call; Redis commands in the window, per call:\n", (cpu-rcpu)/calls*1e6, rcpu/calls*1e6)
		for _, c := range cmdstats {
			fmt.Printf("  %-28s %6.2f calls  %6.1f µs inside Redis\n", c.name, float64(c.calls)/calls, c.usec/calls)
		}
		// Calls of the last answeredLinger s (sipgo's Timers L and M keep
		// an answered call's transactions that long, sip/proxy.go), about
		// 4 s + the window in.
		held := min(answeredLinger, 4+*window)
		recent := float64(*rate * held)
		fmt.Printf("memory at %d CPS, ~%d s in: node RSS %.0f MiB; Go heap live after a forced collection %.0f MiB (%.1f KB per call of the last %d s); heap-load.pb.gz\n",
			*rate, 4+*window, float64(rssLoad)/(1<<20), live/(1<<20), live/recent/1e3, held)
		if err := pprofTop(dir, "cpu-top.txt", "-top", "-nodecount=35", pbin, filepath.Join(dir, "cpu.pb.gz")); err != nil {
			return err
		}
		if err := pprofTop(dir, "cpu-cum.txt", "-top", "-cum", "-nodecount=45", pbin, filepath.Join(dir, "cpu.pb.gz")); err != nil {
			return err
		}
		if err := pprofTop(dir, "allocs-top.txt", "-top", "-nodecount=35", "-sample_index=alloc_space", "-base", filepath.Join(dir, "allocs-0.pb.gz"), pbin, filepath.Join(dir, "allocs-1.pb.gz")); err != nil {
			return err
		}
		if err := pprofTop(dir, "allocs-objects-top.txt", "-top", "-nodecount=25", "-sample_index=alloc_objects", "-base", filepath.Join(dir, "allocs-0.pb.gz"), pbin, filepath.Join(dir, "allocs-1.pb.gz")); err != nil {
			return err
		}
		sys.stop()
		if *queued > 0 {
			if err := queuedHeap(&e2, dir, *queued); err != nil {
				return err
			}
		}
		fmt.Println("profiles and tops in", dir)
		return nil
	}
}

func fetch(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, r.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pprofTop runs `go tool pprof args...`, writes the output to dir/name and
// prints its head.
func pprofTop(dir, name string, args ...string) error {
	out, err := exec.Command("go", append([]string{"tool", "pprof"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof %v: %w\n%s", args, err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, name), out, 0o644); err != nil {
		return err
	}
	lines := strings.Split(string(out), "\n")
	fmt.Printf("\n== %s ==\n%s\n", name, strings.Join(lines[:min(len(lines), 30)], "\n"))
	return nil
}

// queuedHeap holds `queued` calls waiting for slots and takes a heap
// profile and the goroutine count.
func queuedHeap(e *env, dir string, queued int) error {
	sk, err := startSink(e.ctx)
	if err != nil {
		return err
	}
	defer sk.stop()
	sys, err := startCpsguardRedis(e, filepath.Join(dir, "queued"), procs.CpsguardOptions{
		PeerCPS: 100000, CarrierCPS: 1, MaxWait: 4 * time.Hour, Carrier: sk.Addr(),
	})
	if err != nil {
		return err
	}
	defer sys.stop()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = sipbench.RunCaller(ctx, sipbench.CallerOptions{Target: sys.addr, Rate: 2000, Count: queued, Linger: 2 * time.Minute, Prefix: "heap"})
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		q, err := sys.guard.Metric(e.ctx, "cpsguard_pacing_queued", "")
		if err == nil && int(q) >= queued*99/100 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	base := "http://" + sys.guard.HTTP + "/debug/pprof/"
	if err := fetch(e.ctx, base+"heap?gc=1", filepath.Join(dir, "heap-queued.pb.gz")); err != nil {
		return err
	}
	if err := fetch(e.ctx, base+"goroutine?debug=1", filepath.Join(dir, "goroutines-queued.txt")); err != nil {
		return err
	}
	rss, _ := procs.RSS(sys.pid)
	b, _ := os.ReadFile(filepath.Join(dir, "goroutines-queued.txt"))
	first, _, _ := strings.Cut(string(b), "\n")
	fmt.Printf("\nqueued: %d calls, RSS %.1f MiB, %s\n", queued, mib(rss), first)
	return pprofTop(dir, "heap-queued-top.txt", "-top", "-nodecount=25", "-sample_index=inuse_space", e.cpsguard, filepath.Join(dir, "heap-queued.pb.gz"))
}

// redisStat is one line of Redis's INFO commandstats.
type redisStat struct {
	name  string
	calls int64
	usec  float64
}

func resetRedisStats(ctx context.Context, s *system) {
	if s.redis == nil {
		return
	}
	_ = exec.CommandContext(ctx, "redis-cli", "-u", "redis://"+s.redis.Addr, "CONFIG", "RESETSTAT").Run()
}

// redisCommandStats reads INFO commandstats of the system's Redis (nil
// without one, or when redis-cli fails: the figure is a help, not a test).
func redisCommandStats(ctx context.Context, s *system) []redisStat {
	if s.redis == nil {
		return nil
	}
	out, err := exec.CommandContext(ctx, "redis-cli", "-u", "redis://"+s.redis.Addr, "INFO", "commandstats").Output()
	if err != nil {
		return nil
	}
	var stats []redisStat
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		st := redisStat{name: strings.TrimPrefix(name, "cmdstat_")}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		stats = append(stats, st)
	}
	return stats
}
