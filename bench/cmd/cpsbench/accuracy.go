package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/sipbench"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// sinkRun is a sink answering in the background.
type sinkRun struct {
	*sipbench.Sink
	cancel context.CancelFunc
	done   chan struct{}
}

func startSink(ctx context.Context) (*sinkRun, error) {
	s, err := sipbench.NewSink("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &sinkRun{Sink: s, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); s.Run(ctx) }()
	return r, nil
}

func (r *sinkRun) stop() { r.cancel(); <-r.done }

// system is one device under test between caller and sink.
type system struct {
	name  string
	addr  string // where the caller sends
	pid   int
	stop  func()
	guard *procs.Cpsguard // set for cpsguard
	redis *procs.Redis
}

// startCpsguardRedis starts a private Redis and a cpsguard node on it.
func startCpsguardRedis(e *env, dir string, o procs.CpsguardOptions) (*system, error) {
	rd, err := procs.StartRedis(filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	o.Bin, o.Dir, o.Redis = e.cpsguard, dir, rd.Addr
	g, err := procs.StartCpsguard(o)
	if err != nil {
		rd.Stop(time.Second)
		return nil, err
	}
	return &system{name: "cpsguard", addr: g.SIP, pid: g.Pid(), guard: g, redis: rd, stop: func() {
		g.Stop(5 * time.Second)
		rd.Stop(2 * time.Second)
	}}, nil
}

func startKamailio(e *env, dir, dest string, pipelimit int) (*system, error) {
	k, err := procs.StartKamailio(procs.KamailioOptions{Config: e.kamCfg, Dir: dir, Dest: "sip:" + dest, Pipelimit: pipelimit})
	if err != nil {
		return nil, err
	}
	name := "kamailio"
	if pipelimit > 0 {
		name = "kamailio-pipelimit"
	}
	return &system{name: name, addr: k.Addr, pid: k.Pid(), stop: func() { k.Stop(3 * time.Second) }}, nil
}

type accuracyResult struct {
	system           string
	run              int
	offered, calls   int
	ok, rejected     int
	maxWindow        int
	cps, util        float64
	retrans, noFinal int
	arrivals         []time.Time
	t0               time.Time
}

func accuracyCmd(fs *flag.FlagSet) func(*env) error {
	limit := fs.Int("limit", 100, "CPS limit")
	factor := fs.Float64("factor", 3, "offered load as a multiple of the limit")
	seconds := fs.Float64("seconds", 10, "offered for this long (uniform) or bursting for this long in total (onoff)")
	pattern := fs.String("pattern", "uniform", "uniform: a steady factor x limit; onoff: 1 s bursts at factor x limit, 1.3 s apart (idle between)")
	return func(e *env) error {
		offered := float64(*limit) * *factor
		count := int(offered * *seconds)
		dur := time.Duration(*seconds * float64(time.Second))
		var at func(int) time.Duration
		tag := ""
		if *pattern == "onoff" {
			// Bursts of 1 s at `offered`, a burst starting every 2.3 s: the
			// bursts' phase against any fixed 1 s interval timer shifts by
			// 0.3 s each time, so some burst straddles a timer tick.
			perBurst := int(offered)
			at = func(i int) time.Duration {
				b, k := i/perBurst, i%perBurst
				return time.Duration(b)*2300*time.Millisecond + time.Duration(float64(k)/offered*float64(time.Second))
			}
			tag = "-onoff"
		} else if *pattern != "uniform" {
			return fmt.Errorf("unknown -pattern %q", *pattern)
		}
		fmt.Printf("accuracy: %d CPS limit, offered %.0f CPS %s for %s (%d calls), %d runs per system\n", *limit, offered, *pattern, dur, count, e.runs)
		var all []accuracyResult
		for run := 1; run <= e.runs; run++ {
			for _, name := range []string{"cpsguard", "kamailio-pipelimit"} {
				if e.ctx.Err() != nil {
					return e.ctx.Err()
				}
				r, err := accuracyOnce(e, name, run, *limit, offered, count, dur, at, tag)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", name, run, err)
				}
				fmt.Printf("  %-19s run %d: at carrier %d calls, max %d in a sliding 1 s, util %.1f %%, caller saw %d OK %d rejected %d no-final %d retrans (load %s)\n",
					name, run, r.calls, r.maxWindow, 100*r.util, r.ok, r.rejected, r.noFinal, r.retrans, load())
				all = append(all, r)
			}
		}
		return accuracyReport(e, all, *limit, tag)
	}
}

func accuracyOnce(e *env, name string, run, limit int, offered float64, count int, dur time.Duration, at func(int) time.Duration, tag string) (accuracyResult, error) {
	dir := e.dir("accuracy"+tag, fmt.Sprintf("%s-%d", name, run))
	sk, err := startSink(e.ctx)
	if err != nil {
		return accuracyResult{}, err
	}
	defer sk.stop()
	var sys *system
	if name == "cpsguard" {
		sys, err = startCpsguardRedis(e, dir, procs.CpsguardOptions{
			PeerCPS: float64(limit), CarrierCPS: 100000, MaxWait: time.Second, Carrier: sk.Addr(),
		})
	} else {
		sys, err = startKamailio(e, dir, sk.Addr(), limit)
	}
	if err != nil {
		return accuracyResult{}, err
	}
	defer sys.stop()
	time.Sleep(300 * time.Millisecond)

	recs, cst, err := sipbench.RunCaller(e.ctx, sipbench.CallerOptions{
		Target: sys.addr, Rate: offered, Count: count, Linger: 5 * time.Second, At: at,
		Prefix: fmt.Sprintf("acc-%s-%d-%d", name, run, time.Now().UnixNano()%1e6),
	})
	if err != nil {
		return accuracyResult{}, err
	}
	time.Sleep(200 * time.Millisecond)
	arr := sk.Arrivals()
	ts := make([]time.Time, len(arr))
	rows := make([][]string, len(arr))
	for i, a := range arr {
		ts[i] = a.At
		rows[i] = []string{name, strconv.Itoa(run), a.CallID, strconv.FormatInt(a.At.UnixNano(), 10)}
	}
	if err := stats.WriteCSV(filepath.Join(dir, "arrivals.csv"), []string{"system", "run", "call_id", "unix_ns"}, rows); err != nil {
		return accuracyResult{}, err
	}
	t0 := time.Time{}
	if len(recs) > 0 {
		t0 = recs[0].Sent
	}
	maxW, _ := siptest.MaxInWindowAt(ts, time.Second)
	r := accuracyResult{
		system: name, run: run, offered: cst.Sent, calls: len(ts), ok: cst.OK, rejected: cst.Rejected,
		maxWindow: maxW, retrans: cst.Retrans, noFinal: cst.NoFinal, arrivals: ts, t0: t0,
	}
	secs := dur.Seconds()
	r.cps = float64(r.calls) / secs
	r.util = r.cps / float64(limit)
	return r, nil
}

func accuracyReport(e *env, all []accuracyResult, limit int, tag string) error {
	t := stats.Table{Header: []string{"system", "run", "offered", "at_carrier", "max_in_sliding_1s", "x_limit", "cps", "utilisation_pct", "caller_200", "caller_rejected", "no_final", "retrans"}}
	for _, r := range all {
		t.Add(r.system, r.run, r.offered, r.calls, r.maxWindow, float64(r.maxWindow)/float64(limit), r.cps, 100*r.util, r.ok, r.rejected, r.noFinal, r.retrans)
	}
	for _, name := range []string{"cpsguard", "kamailio-pipelimit"} {
		var mw, cps, ut []float64
		worst := 0
		for _, r := range all {
			if r.system == name {
				mw = append(mw, float64(r.maxWindow))
				cps = append(cps, r.cps)
				ut = append(ut, 100*r.util)
				worst = max(worst, r.maxWindow)
			}
		}
		t.Add(name, "median", "", "", stats.Median(mw), stats.Median(mw)/float64(limit), stats.Median(cps), stats.Median(ut), "", "", "", "")
		t.Add(name, "worst", "", "", worst, float64(worst)/float64(limit), "", "", "", "", "", "")
	}
	fmt.Println()
	t.Print(os.Stdout)
	if err := t.WriteCSV(filepath.Join(e.out, "accuracy"+tag+".csv")); err != nil {
		return err
	}
	// Picture: sliding-second count over time, the worst run (highest
	// sliding-second count) of each system.
	series := map[string]accuracyResult{}
	for _, r := range all {
		if w, ok := series[r.system]; !ok || r.maxWindow > w.maxWindow {
			series[r.system] = r
		}
	}
	var lines []plotLine
	rows := [][]string{}
	for _, name := range []string{"cpsguard", "kamailio-pipelimit"} {
		r, ok := series[name]
		if !ok {
			continue
		}
		if len(r.arrivals) == 0 {
			continue
		}
		grid, n := stats.SlidingGrid(r.arrivals, time.Second, r.t0, r.arrivals[len(r.arrivals)-1].Add(time.Second), 5*time.Millisecond)
		pl := plotLine{name: name}
		for i, ts := range grid {
			x := ts.Sub(r.t0).Seconds()
			pl.x = append(pl.x, x)
			pl.y = append(pl.y, float64(n[i]))
			rows = append(rows, []string{name, strconv.FormatFloat(x, 'f', 3, 64), strconv.Itoa(n[i])})
		}
		lines = append(lines, pl)
	}
	if err := stats.WriteCSV(filepath.Join(e.out, "accuracy"+tag+"-sliding.csv"), []string{"system", "t_s", "calls_in_sliding_1s"}, rows); err != nil {
		return err
	}
	png := filepath.Join(e.results, "accuracy"+tag+"-sliding-window.png")
	what := "offered 3x steadily"
	if tag == "-onoff" {
		what = "offered 3x in 1 s bursts every 2.3 s"
	}
	if err := plotSeries(png, fmt.Sprintf("Calls at the carrier in the sliding second (limit %d, %s; worst run)", limit, what),
		"time since first INVITE (s)", "calls in the last 1 s", lines, float64(limit)); err != nil {
		return err
	}
	fmt.Println("wrote", filepath.Join(e.out, "accuracy"+tag+".csv"), "and", png)
	return nil
}
