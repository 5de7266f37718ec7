package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/sipbench"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
)

type latResult struct {
	system           string
	run              int
	calls            int
	trying, forward  []time.Duration
	p50T, p99T, maxT time.Duration
	p50F, p99F, maxF time.Duration
}

func latencyCmd(fs *flag.FlagSet) func(*env) error {
	rate := fs.Int("rate", 1000, "CPS offered")
	seconds := fs.Int("seconds", 5, "seconds per run")
	systems := fs.String("systems", "direct,cpsguard,kamailio", "systems (direct = caller straight to the sink: the harness floor; cpsguard-local = the node on its in-process store)")
	warmup := fs.Int("warmup", 0, "seconds of calls at -rate before each measured run (0: half a second's); a few minutes fill the node's bounded tables (ended dialogs: 262,144 ends, two per answered call), as on a node that has run a while")
	traced := fs.Bool("trace", false, "take cpsguard's execution trace during each measured run (needs the cpsguardprof build) and say what the node ran during each stall (stalls.txt)")
	return func(e *env) error {
		fmt.Printf("latency: %d CPS for %d s; INVITE->100 Trying at the caller and INVITE->forwarded INVITE at the sink (kernel receive stamps, one clock)\n", *rate, *seconds)
		var all []latResult
		for run := 1; run <= e.runs; run++ {
			for _, name := range strings.Split(*systems, ",") {
				if e.ctx.Err() != nil {
					return e.ctx.Err()
				}
				r, err := latencyOnce(e, name, run, *rate, *seconds, *warmup, *traced)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", name, run, err)
				}
				fmt.Printf("  %-8s run %d: %d calls; ->100 p50 %s p99 %s ms; ->forwarded p50 %s p99 %s ms (load %s)\n",
					name, run, r.calls, stats.Ms(r.p50T), stats.Ms(r.p99T), stats.Ms(r.p50F), stats.Ms(r.p99F), load())
				all = append(all, r)
			}
		}
		t := stats.Table{Header: []string{"system", "run", "calls", "trying_p50_ms", "trying_p99_ms", "trying_max_ms", "forward_p50_ms", "forward_p99_ms", "forward_max_ms"}}
		for _, r := range all {
			t.Add(r.system, r.run, r.calls, r.p50T, r.p99T, r.maxT, r.p50F, r.p99F, r.maxF)
		}
		for _, name := range strings.Split(*systems, ",") {
			var a, b, c, d []time.Duration
			for _, r := range all {
				if r.system == name {
					a, b, c, d = append(a, r.p50T), append(b, r.p99T), append(c, r.p50F), append(d, r.p99F)
				}
			}
			m := [4]time.Duration{stats.MedianDur(a), stats.MedianDur(b), stats.MedianDur(c), stats.MedianDur(d)}
			t.Add(name, "median", "", m[0], m[1], "", m[2], m[3], "")
		}
		fmt.Println()
		t.Print(os.Stdout)
		if err := t.WriteCSV(filepath.Join(e.out, "latency.csv")); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(e.out, "latency.csv"))
		return nil
	}
}

func latencyOnce(e *env, name string, run, rate, seconds, warmup int, traced bool) (latResult, error) {
	dir := e.dir("latency", fmt.Sprintf("%s-%d", name, run))
	sk, err := startSink(e.ctx)
	if err != nil {
		return latResult{}, err
	}
	defer sk.stop()
	target := sk.Addr()
	var guard *procs.Cpsguard
	switch name {
	case "direct":
	case "cpsguard":
		sys, err := startCpsguardRedis(e, dir, procs.CpsguardOptions{
			PeerCPS: 100000, CarrierCPS: 100000, MaxWait: time.Second, Carrier: sk.Addr(),
		})
		if err != nil {
			return latResult{}, err
		}
		defer sys.stop()
		target, guard = sys.addr, sys.guard
	case "cpsguard-local":
		// The same node on its in-process store: what the Redis round
		// trip (and Redis's share of the box) adds to the setup time.
		g, err := procs.StartCpsguard(procs.CpsguardOptions{
			Bin: e.cpsguard, Dir: dir, PeerCPS: 100000, CarrierCPS: 100000, MaxWait: time.Second, Carrier: sk.Addr(),
		})
		if err != nil {
			return latResult{}, err
		}
		defer g.Stop(5 * time.Second)
		target, guard = g.SIP, g
	case "kamailio":
		sys, err := startKamailio(e, dir, sk.Addr(), 0)
		if err != nil {
			return latResult{}, err
		}
		defer sys.stop()
		target = sys.addr
	default:
		return latResult{}, fmt.Errorf("unknown system %q", name)
	}
	// Warm up (connections, JIT-less but caches, Redis script cache; with
	// -warmup, the node's bounded tables).
	warm := rate / 2
	if warmup > 0 {
		warm = rate * warmup
	}
	if _, _, err := sipbench.RunCaller(e.ctx, sipbench.CallerOptions{Target: target, Rate: float64(rate), Count: warm, Prefix: fmt.Sprintf("warm-%s-%d", name, run)}); err != nil {
		return latResult{}, err
	}
	var traceDone chan error
	tracePath := filepath.Join(dir, "trace.out")
	if traced && guard != nil {
		traceDone = make(chan error, 1)
		url := fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", guard.HTTP, seconds+1)
		go func() { traceDone <- fetch(e.ctx, url, tracePath) }()
	}
	recs, _, err := sipbench.RunCaller(e.ctx, sipbench.CallerOptions{
		Target: target, Rate: float64(rate), Count: rate * seconds, Prefix: fmt.Sprintf("lat-%s-%d", name, run),
	})
	if err != nil {
		return latResult{}, err
	}
	var traceErr error
	if traceDone != nil {
		traceErr = <-traceDone
	}
	arr := map[string]time.Time{}
	for _, a := range sk.Arrivals() {
		arr[a.CallID] = a.At
	}
	r := latResult{system: name, run: run}
	rows := [][]string{}
	for _, c := range recs {
		at, ok := arr[c.CallID]
		if c.Trying.IsZero() || !ok {
			continue
		}
		r.calls++
		tr, fw := c.Trying.Sub(c.Sent), at.Sub(c.Sent)
		r.trying = append(r.trying, tr)
		r.forward = append(r.forward, fw)
		rows = append(rows, []string{c.CallID, strconv.FormatInt(c.Sent.UnixNano(), 10), strconv.FormatInt(int64(tr), 10), strconv.FormatInt(int64(fw), 10)})
	}
	if err := stats.WriteCSV(filepath.Join(dir, "calls.csv"), []string{"call_id", "sent_unix_ns", "trying_ns", "forwarded_ns"}, rows); err != nil {
		return r, err
	}
	if traceDone != nil {
		if err := writeStalls(tracePath, traceErr, recs, arr, filepath.Join(dir, "stalls.txt")); err != nil {
			return r, err
		}
	}
	r.p50T, r.p99T, r.maxT = stats.Pct(r.trying, 50), stats.Pct(r.trying, 99), stats.Max(r.trying)
	r.p50F, r.p99F, r.maxF = stats.Pct(r.forward, 50), stats.Pct(r.forward, 99), stats.Max(r.forward)
	return r, nil
}

// writeStalls writes stallReport of the measured calls to out and prints
// its summary line.
func writeStalls(tracePath string, traceErr error, recs []sipbench.CallRecord, arr map[string]time.Time, out string) error {
	if traceErr != nil {
		return fmt.Errorf("trace: %w (is -cpsguard the cpsguardprof build?)", traceErr)
	}
	nt, err := readNodeTrace(tracePath)
	if err != nil {
		return err
	}
	var calls []sentCall
	for _, c := range recs {
		if at, ok := arr[c.CallID]; ok {
			calls = append(calls, sentCall{sent: c.Sent, forward: at.Sub(c.Sent)})
		}
	}
	rep := stallReport(nt, calls)
	fmt.Print("    ", rep[:strings.IndexByte(rep, '\n')+1])
	return os.WriteFile(out, []byte(rep), 0o644)
}
