package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/sipbench"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/pacing"
)

type pacingResult struct {
	build                     string // "cpsguard" or the -compare-label
	run                       int
	offered, calls, rejected  int
	maxWindow                 int
	gapP1, gapP50, gapP99     time.Duration
	lateP50, lateP99, lateMax time.Duration
	lateN                     int
	delayP50, delayMax        time.Duration
	sent, arrival             []time.Time // per forwarded call, for the plot
	late                      []*time.Duration
	t0                        time.Time
}

// slotWatcher polls the carrier's slot set in Redis and remembers every
// slot it saw (member -> score): the schedule the proxy was given.
type slotWatcher struct {
	mu    sync.Mutex
	slots map[string]time.Time // Call-ID -> slot time (Redis clock, µs)
}

func (w *slotWatcher) run(ctx context.Context, c *redis.Client, key string) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err == nil {
			w.mu.Lock()
			for _, z := range zs {
				m, _ := z.Member.(string)
				// The member is the node's prefix, then Call-ID/branch/….
				id, _, _ := strings.Cut(pacing.CallOfMember(m), "/")
				if _, ok := w.slots[id]; !ok {
					w.slots[id] = time.UnixMicro(int64(z.Score))
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func pacingCmd(fs *flag.FlagSet) func(*env) error {
	cps := fs.Float64("cps", 50, "carrier CPS")
	offered := fs.Float64("offered", 100, "offered CPS")
	seconds := fs.Float64("seconds", 10, "offered for this long")
	maxWait := fs.Duration("max-wait", 2*time.Second, "carrier max_wait")
	cmpBin := fs.String("compare-cpsguard", "", "a second cpsguard `binary` (e.g. with a suggested fix) run alternately")
	cmpLabel := fs.String("compare-label", "candidate", "name of the second binary in tables and plots")
	return func(e *env) error {
		count := int(*offered * *seconds)
		fmt.Printf("pacing: carrier %g CPS (max_wait %s), offered %g CPS for %gs (%d calls), cpsguard on Redis\n", *cps, *maxWait, *offered, *seconds, count)
		var all []pacingResult
		for run := 1; run <= e.runs; run++ {
			if e.ctx.Err() != nil {
				return e.ctx.Err()
			}
			builds := []struct{ label, bin string }{{"cpsguard", e.cpsguard}}
			if *cmpBin != "" {
				abs, _ := filepath.Abs(*cmpBin)
				builds = append(builds, struct{ label, bin string }{*cmpLabel, abs})
			}
			for _, b := range builds {
				e2 := *e
				e2.cpsguard = b.bin
				r, err := pacingOnce(&e2, run, *cps, *offered, count, *maxWait)
				if err != nil {
					return fmt.Errorf("run %d: %w", run, err)
				}
				r.build = b.label
				fmt.Printf("  %s run %d: %d at carrier, %d rejected, max %d in a sliding 1 s; gap p50 %s p99 %s ms; lateness p50 %s p99 %s max %s ms (%d matched) (load %s)\n",
					r.build, run, r.calls, r.rejected, r.maxWindow, stats.Ms(r.gapP50), stats.Ms(r.gapP99), stats.Ms(r.lateP50), stats.Ms(r.lateP99), stats.Ms(r.lateMax), r.lateN, load())
				all = append(all, r)
			}
		}
		ideal := time.Duration(float64(time.Second) / *cps)
		t := stats.Table{Header: []string{"build", "run", "offered", "at_carrier", "rejected", "max_in_sliding_1s", "ideal_gap_ms", "gap_p1_ms", "gap_p50_ms", "gap_p99_ms", "late_p50_ms", "late_p99_ms", "late_max_ms", "queue_delay_p50_ms", "queue_delay_max_ms"}}
		var order []string
		for _, r := range all {
			t.Add(r.build, r.run, r.offered, r.calls, r.rejected, r.maxWindow, ideal, r.gapP1, r.gapP50, r.gapP99, r.lateP50, r.lateP99, r.lateMax, r.delayP50, r.delayMax)
			if !slices.Contains(order, r.build) {
				order = append(order, r.build)
			}
		}
		for _, b := range order {
			var mw []float64
			var l50, l99, lmax, g1, g50, g99 []time.Duration
			worst := 0
			for _, r := range all {
				if r.build != b {
					continue
				}
				mw = append(mw, float64(r.maxWindow))
				worst = max(worst, r.maxWindow)
				l50, l99, lmax = append(l50, r.lateP50), append(l99, r.lateP99), append(lmax, r.lateMax)
				g1, g50, g99 = append(g1, r.gapP1), append(g50, r.gapP50), append(g99, r.gapP99)
			}
			t.Add(b, "median", "", "", "", stats.Median(mw), ideal, stats.MedianDur(g1), stats.MedianDur(g50), stats.MedianDur(g99), stats.MedianDur(l50), stats.MedianDur(l99), stats.MedianDur(lmax), "", "")
			t.Add(b, "worst", "", "", "", worst, "", "", "", "", "", "", stats.Max(lmax), "", "")
		}
		fmt.Println()
		t.Print(os.Stdout)
		if err := t.WriteCSV(filepath.Join(e.out, "pacing.csv")); err != nil {
			return err
		}
		// Pictures from the first run: queue delay vs time, and the
		// sliding second at the carrier.
		r := all[0]
		qd := plotLine{name: "queue delay (forwarded INVITE - sent INVITE)", dots: true}
		for i := range r.sent {
			qd.x = append(qd.x, r.sent[i].Sub(r.t0).Seconds())
			qd.y = append(qd.y, r.arrival[i].Sub(r.sent[i]).Seconds()*1000)
		}
		png1 := filepath.Join(e.results, "pacing-queue-delay.png")
		if err := plotSeries(png1, fmt.Sprintf("cpsguard queue delay: carrier %g CPS, offered %g CPS, max_wait %s", *cps, *offered, *maxWait),
			"INVITE sent at (s)", "queue delay (ms)", []plotLine{qd}, 0); err != nil {
			return err
		}
		arr := append([]time.Time(nil), r.arrival...)
		sortTimes(arr)
		grid, n := stats.SlidingGrid(arr, time.Second, r.t0, arr[len(arr)-1].Add(time.Second), 5*time.Millisecond)
		sl := plotLine{name: "cpsguard, carrier paced"}
		for i, g := range grid {
			sl.x = append(sl.x, g.Sub(r.t0).Seconds())
			sl.y = append(sl.y, float64(n[i]))
		}
		png2 := filepath.Join(e.results, "pacing-sliding-window.png")
		if err := plotSeries(png2, fmt.Sprintf("Calls at a %g CPS carrier in the sliding second (offered %g CPS)", *cps, *offered),
			"time since first INVITE (s)", "calls in the last 1 s", []plotLine{sl}, *cps); err != nil {
			return err
		}
		var lls []plotLine
		seen := map[string]bool{}
		for _, r := range all {
			if seen[r.build] {
				continue
			}
			seen[r.build] = true
			l := plotLine{name: r.build + fmt.Sprintf(" (run %d)", r.run), dots: true}
			for i := range r.arrival {
				if r.late[i] == nil {
					continue
				}
				l.x = append(l.x, r.arrival[i].Sub(r.t0).Seconds())
				l.y = append(l.y, float64(*r.late[i])/1e6)
			}
			lls = append(lls, l)
		}
		png3 := filepath.Join(e.results, "pacing-lateness.png")
		if err := plotSeries(png3, fmt.Sprintf("Lateness of each INVITE at the carrier vs its slot (carrier %g CPS, offered %g CPS)", *cps, *offered),
			"arrival at the carrier (s)", "arrival - slot (ms)", lls, 0); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(e.out, "pacing.csv"), png1, png2, png3)
		return nil
	}
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

func pacingOnce(e *env, run int, cps, offered float64, count int, maxWait time.Duration) (pacingResult, error) {
	dir := e.dir("pacing", fmt.Sprintf("%s-run-%d", filepath.Base(e.cpsguard), run))
	sk, err := startSink(e.ctx)
	if err != nil {
		return pacingResult{}, err
	}
	defer sk.stop()
	sys, err := startCpsguardRedis(e, dir, procs.CpsguardOptions{
		PeerCPS: 10000, CarrierCPS: cps, MaxWait: maxWait, Carrier: sk.Addr(),
	})
	if err != nil {
		return pacingResult{}, err
	}
	defer sys.stop()
	rc := redis.NewClient(&redis.Options{Addr: sys.redis.Addr})
	defer rc.Close()
	w := &slotWatcher{slots: map[string]time.Time{}}
	wctx, wcancel := context.WithCancel(e.ctx)
	wdone := make(chan struct{})
	go func() { defer close(wdone); w.run(wctx, rc, lua.Key("bench", "carrier", "carrier")) }()

	recs, cst, err := sipbench.RunCaller(e.ctx, sipbench.CallerOptions{
		Target: sys.addr, Rate: offered, Count: count, Linger: maxWait + 5*time.Second,
		Prefix: fmt.Sprintf("pace-%d-%d", run, time.Now().UnixNano()%1e6),
	})
	wcancel()
	<-wdone
	if err != nil {
		return pacingResult{}, err
	}
	sent := map[string]time.Time{}
	for _, c := range recs {
		sent[c.CallID] = c.Sent
	}
	arr := sk.Arrivals()
	r := pacingResult{run: run, offered: cst.Sent, calls: len(arr), rejected: cst.Rejected}
	if len(recs) > 0 {
		r.t0 = recs[0].Sent
	}
	ts := make([]time.Time, len(arr))
	var late, delay []time.Duration
	rows := [][]string{}
	w.mu.Lock()
	for i, a := range arr {
		ts[i] = a.At
		s := sent[a.CallID]
		r.sent = append(r.sent, s)
		r.arrival = append(r.arrival, a.At)
		delay = append(delay, a.At.Sub(s))
		lateNS := ""
		var lp *time.Duration
		if slot, ok := w.slots[a.CallID]; ok {
			l := a.At.Sub(slot)
			lp = &l
			late = append(late, l)
			lateNS = strconv.FormatInt(int64(a.At.Sub(slot)), 10)
		}
		r.late = append(r.late, lp)
		rows = append(rows, []string{a.CallID, strconv.FormatInt(s.UnixNano(), 10), strconv.FormatInt(a.At.UnixNano(), 10), lateNS})
	}
	w.mu.Unlock()
	if err := stats.WriteCSV(filepath.Join(dir, "calls.csv"), []string{"call_id", "sent_unix_ns", "arrived_unix_ns", "late_vs_slot_ns"}, rows); err != nil {
		return r, err
	}
	r.maxWindow, _ = siptest.MaxInWindowAt(ts, time.Second)
	g := stats.Gaps(ts)
	r.gapP1, r.gapP50, r.gapP99 = stats.Pct(g, 1), stats.Pct(g, 50), stats.Pct(g, 99)
	r.lateN = len(late)
	r.lateP50, r.lateP99, r.lateMax = stats.Pct(late, 50), stats.Pct(late, 99), stats.Max(late)
	r.delayP50, r.delayMax = stats.Pct(delay, 50), stats.Max(delay)
	return r, nil
}
