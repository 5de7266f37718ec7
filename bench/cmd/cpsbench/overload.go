package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
)

// overloadCmd is issue 15's overload run: one node on Redis with
// store.on_error reject and store.redis.timeout 50ms (the default), a SIPp
// carrier, and a SIPp caller offering far more than the node can decide
// (10,000 CPS for 3 s); right after its last INVITE is sent, a second
// caller offers a normal second (1,000 CPS for 1 s). It reports whether cpsguard_store_up stayed 1
// (and how often the node logged a switch), the share of the overload's
// calls that got a final answer (200, or a refusal: 503, 408, 480, 486, 487,
// 500; SIPp counts any other answer, none within 5 s, or a BYE without its
// 200, as failed), and whether the normal second was served (every call 200).
func overloadCmd(fs *flag.FlagSet) func(*env) error {
	rate := fs.Int("rate", 10000, "offered CPS of the overload")
	seconds := fs.Int("seconds", 3, "seconds of overload")
	after := fs.Int("after-rate", 1000, "CPS of the normal second that follows")
	timeout := fs.Duration("redis-timeout", 50*time.Millisecond, "store.redis.timeout of the node")
	inflight := fs.Int("max-inflight", 0, "sip.max_inflight of the node (0: not written, the node's default)")
	probe := fs.Bool("probe", true, "probe the carrier (false: probing and passive down-marking off, to see the store and the shedding alone)")
	via := fs.String("caller-via", "", "parameters appended to the callers' INVITE Via, e.g. ';oc;oc-algo=\"loss\"' (an RFC 7339 client; a quoted value keeps INVITEs off the node's raw-byte shed)")
	return func(e *env) error {
		fmt.Printf("overload: %d CPS for %d s, then %d CPS for 1 s; one node on Redis, on_error reject, store.redis.timeout %s, carrier probe %v; SIPp caller and carrier on loopback\n",
			*rate, *seconds, *after, *timeout, *probe)
		t := stats.Table{Header: []string{"run", "offered", "final_answer_pct", "ok_200", "failed", "store_up_min", "store_switches", "store_down_ms",
			"forwarded", "rejected_overload", "rejected_store", "rejected_down", "next_second_ok", "next_second_of", "next_second_failed", "next_second_retrans", "node_cpu_s"}}
		for run := 1; run <= e.runs; run++ {
			r, err := overloadRun(e, run, *rate, *seconds, *after, *timeout, *inflight, !*probe, *via)
			if err != nil {
				return err
			}
			fmt.Printf("  run %d: final answer %.2f %% (%d of %d; failed %d), store_up min %g (%d switches, seen down %d ms), outcomes forwarded %g rejected_overload %g rejected_store %g rejected_down %g; next second %d/%d ok (failed %d, retrans %d); node CPU %.2f s (load %s)\n",
				run, r.finalPct, r.final, r.offered, r.failed, r.upMin, r.switches, r.downMS, r.forwarded, r.shed, r.store, r.down, r.next.ok, *after, r.next.failed, r.next.retrans, r.nodeCPU, load())
			t.Add(run, r.offered, r.finalPct, r.ok200, r.failed, r.upMin, r.switches, r.downMS, r.forwarded, r.shed, r.store, r.down, r.next.ok, *after, r.next.failed, r.next.retrans, r.nodeCPU)
		}
		fmt.Println()
		t.Print(os.Stdout)
		path := filepath.Join(e.out, "overload.csv")
		if err := t.WriteCSV(path); err != nil {
			return err
		}
		fmt.Println("wrote", path)
		return nil
	}
}

type overloadResult struct {
	offered, final, ok200, failed int
	finalPct                      float64
	upMin                         float64
	downMS                        int
	switches                      int // "switching to fallback" lines in the node's log
	forwarded, shed, store, down  float64
	next                          sippResult
	// nodeCPU is the node's CPU seconds (user and system) over the run.
	nodeCPU float64
}

func overloadRun(e *env, run, rate, seconds, after int, timeout time.Duration, inflight int, noProbe bool, via string) (overloadResult, error) {
	var r overloadResult
	dir := e.dir("overload", fmt.Sprintf("run-%d", run))
	sipp, err := tool("sipp", "sip-tester")
	if err != nil {
		return r, err
	}
	scen := filepath.Join(filepath.Dir(e.kamCfg), "..", "sipp")
	uasPort := procs.FreeUDP()
	sys, err := startCpsguardRedis(e, dir, procs.CpsguardOptions{
		PeerCPS: 100000, CarrierCPS: 100000, MaxWait: time.Second, RedisTimeout: timeout, LogLevel: "warn", MaxInflight: inflight, NoProbe: noProbe,
		Carrier: "127.0.0.1:" + strconv.Itoa(uasPort),
	})
	if err != nil {
		return r, err
	}
	defer sys.stop()
	cpu0 := procs.CPUTime(sys.pid)

	limit := strconv.Itoa(seconds+20) + "s"
	uasStat := filepath.Join(dir, "uas-stat.csv")
	us, err := procs.Start(sipp, filepath.Join(dir, "uas.log"), "-sf", filepath.Join(scen, "uas_overload.xml"),
		"-i", "127.0.0.1", "-p", strconv.Itoa(uasPort), "-buff_size", "4194304", "-nostdin",
		"-trace_stat", "-stf", uasStat, "-fd", "1", "-timeout", limit,
		"-trace_err", "-error_file", filepath.Join(dir, "uas-errors.log"))
	if err != nil {
		return r, err
	}
	defer us.Stop(2 * time.Second)
	time.Sleep(300 * time.Millisecond)

	// store_up, sampled until the end of the run.
	ctx, stopWatch := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	r.upMin = 1
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			v, err := sys.guard.Metric(qctx, "cpsguard_store_up", "")
			cancel()
			if err == nil && v < 1 {
				r.upMin = min(r.upMin, v)
				r.downMS += 20
			}
		}
	}()

	caller := func(name, scenario string, rate, calls int) (*procs.Proc, string, error) {
		stat := filepath.Join(dir, name+"-stat.csv")
		os.Remove(stat)
		sf, err := callerScenario(filepath.Join(scen, scenario), dir, via)
		if err != nil {
			return nil, "", err
		}
		p, err := procs.Start(sipp, filepath.Join(dir, name+".log"), "-sf", sf,
			"-i", "127.0.0.1", "-p", strconv.Itoa(procs.FreeUDP()), "-r", strconv.Itoa(rate), "-m", strconv.Itoa(calls),
			"-buff_size", "4194304", "-nostdin", "-trace_stat", "-stf", stat, "-fd", "1",
			"-recv_timeout", "5000", "-timeout", limit,
			"-trace_err", "-error_file", filepath.Join(dir, name+"-errors.log"), sys.addr)
		return p, stat, err
	}
	r.offered = rate * seconds
	over, overStat, err := caller("overload", "uac_overload.xml", rate, r.offered)
	if err != nil {
		stopWatch()
		return r, err
	}
	// The next second starts when the overload's last INVITE is sent (SIPp,
	// on the same cores, may take longer than the nominal seconds).
	time.Sleep(time.Duration(seconds) * time.Second)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st, err := readSippStat(overStat); err == nil && st.created >= r.offered {
			break
		}
	}
	next, nextStat, err := caller("next", "uac.xml", after, after)
	if err != nil {
		over.Stop(time.Second)
		stopWatch()
		return r, err
	}
	for _, p := range []*procs.Proc{over, next} {
		if !p.Wait(time.Duration(seconds+25) * time.Second) {
			p.Stop(2 * time.Second)
		}
	}
	time.Sleep(500 * time.Millisecond)
	stopWatch()
	wg.Wait()
	r.nodeCPU = procs.CPUTime(sys.pid) - cpu0
	_ = os.WriteFile(filepath.Join(dir, "metrics.txt"), []byte(sys.guard.Scrape()), 0o644)

	o, err := readSippStat(overStat)
	if err != nil {
		return r, err
	}
	if r.next, err = readSippStat(nextStat); err != nil {
		return r, err
	}
	r.final, r.failed = o.ok, o.failed
	if r.offered > 0 {
		r.finalPct = 100 * float64(o.ok) / float64(r.offered)
	}
	mctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	outcome := func(o string) float64 {
		v, _ := sys.guard.Metric(mctx, "cpsguard_calls_total", `outcome="`+o+`"`)
		return v
	}
	r.forwarded, r.shed, r.store = outcome("forwarded"), outcome("rejected_overload"), outcome("rejected_store")
	r.down = outcome("rejected_down")
	// 200s of the overload: forwarded calls minus the next second's.
	r.ok200 = int(r.forwarded) - r.next.ok
	// The node logs every switch (at warn): a scrape that timed out on the
	// saturated node would miss a short one.
	if b, err := os.ReadFile(filepath.Join(dir, "cpsguard.log")); err == nil {
		r.switches = strings.Count(string(b), "switching to fallback")
	}
	if r.switches > 0 {
		r.upMin = 0
	}
	return r, nil
}

// callerScenario returns the SIPp scenario a caller runs: path itself, or,
// with via set, a copy in dir whose first Via (the INVITE's) ends with via.
func callerScenario(path, dir, via string) (string, error) {
	if via == "" {
		return path, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	const top = ";branch=[branch]\n"
	if !strings.Contains(string(b), top) {
		return "", fmt.Errorf("%s: no INVITE Via ending in %q to append -caller-via to", path, top)
	}
	out := filepath.Join(dir, "via-"+filepath.Base(path))
	return out, os.WriteFile(out, []byte(strings.Replace(string(b), top, ";branch=[branch]"+via+"\n", 1)), 0o644)
}
