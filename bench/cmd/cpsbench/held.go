package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
)

// heldCmd measures what a node holds per answered call that is still up:
// SIPp (uac_hold.xml) places rate calls a second for seconds s and keeps
// each up for hold, and once every call is answered and the last ones'
// transactions are gone (answeredLinger), the live heap is read after a
// forced collection and compared with the idle node's. Needs the
// cpsguardprof build (-cpsguard), for heap?gc=1.
func heldCmd(fs *flag.FlagSet) func(*env) error {
	rate := fs.Int("rate", 200, "CPS offered (SIPp)")
	seconds := fs.Int("seconds", 40, "seconds of calls placed")
	hold := fs.Duration("hold", 90*time.Second, "how long each answered call stays up (longer than -seconds plus 10 s)")
	return func(e *env) error {
		if *hold < time.Duration(*seconds+answeredLinger+2)*time.Second {
			return fmt.Errorf("-hold %v: the first calls would end before the heap is read (need at least %ds)", *hold, *seconds+answeredLinger+2)
		}
		fmt.Printf("held: %d CPS for %d s, each answered call kept up %v; live heap per call up\n", *rate, *seconds, *hold)
		t := stats.Table{Header: []string{"run", "calls_up", "live_idle_mib", "live_held_mib", "bytes_per_call", "rss_held_mib"}}
		var per []float64
		for run := 1; run <= e.runs; run++ {
			if e.ctx.Err() != nil {
				return e.ctx.Err()
			}
			idle, held, rss, n, err := heldOnce(e, run, *rate, *seconds, *hold)
			if err != nil {
				return fmt.Errorf("run %d: %w", run, err)
			}
			pc := (held - idle) / float64(max(n, 1))
			fmt.Printf("  run %d: %d calls up; live heap idle %.1f MiB, held %.1f MiB: %.0f B per call up; RSS %.1f MiB (load %s)\n",
				run, n, idle/(1<<20), held/(1<<20), pc, mib(rss), load())
			t.Add(run, n, idle/(1<<20), held/(1<<20), pc, mib(rss))
			per = append(per, pc)
		}
		t.Add("median", "", "", "", stats.Median(per), "")
		fmt.Println()
		t.Print(os.Stdout)
		return t.WriteCSV(filepath.Join(e.out, "held.csv"))
	}
}

// heldOnce is one run: the live heap idle and with the calls up, the RSS
// then, and the number of calls answered.
func heldOnce(e *env, run, rate, seconds int, hold time.Duration) (idle, held float64, rss int64, n int, err error) {
	dir := e.dir("held", fmt.Sprintf("run-%d", run))
	sipp, err := tool("sipp", "sip-tester")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	uasPort := procs.FreeUDP()
	sys, err := startCpsguardRedis(e, dir, procs.CpsguardOptions{
		PeerCPS: 100000, CarrierCPS: 100000, MaxWait: time.Second, Carrier: "127.0.0.1:" + strconv.Itoa(uasPort),
	})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer sys.stop()
	liveHeap := func(name string) (float64, error) {
		if err := fetch(e.ctx, "http://"+sys.guard.HTTP+"/debug/pprof/heap?gc=1", filepath.Join(dir, name)); err != nil {
			return 0, fmt.Errorf("%w (is -cpsguard the cpsguardprof build?)", err)
		}
		return sys.guard.Metric(e.ctx, "go_memstats_heap_alloc_bytes", "")
	}
	scen := filepath.Join(filepath.Dir(e.kamCfg), "..", "sipp")
	timeout := strconv.Itoa(int(hold.Seconds())+seconds+30) + "s"
	us, err := procs.Start(sipp, filepath.Join(dir, "uas.log"), "-sf", filepath.Join(scen, "uas.xml"),
		"-i", "127.0.0.1", "-p", strconv.Itoa(uasPort), "-buff_size", "4194304", "-nostdin", "-timeout", timeout,
		"-trace_err", "-error_file", filepath.Join(dir, "uas-errors.log"))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer us.Stop(2 * time.Second)
	time.Sleep(time.Second)
	if idle, err = liveHeap("heap-idle.pb.gz"); err != nil {
		return 0, 0, 0, 0, err
	}
	uc, err := procs.Start(sipp, filepath.Join(dir, "uac.log"), "-sf", filepath.Join(scen, "uac_hold.xml"),
		"-i", "127.0.0.1", "-p", strconv.Itoa(procs.FreeUDP()), "-r", strconv.Itoa(rate), "-m", strconv.Itoa(rate*seconds),
		"-l", strconv.Itoa(2*rate*seconds), "-d", strconv.FormatInt(hold.Milliseconds(), 10),
		"-buff_size", "4194304", "-nostdin", "-timeout", timeout,
		"-trace_err", "-error_file", filepath.Join(dir, "uac-errors.log"), sys.addr)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer uc.Stop(2 * time.Second)
	// Every call placed and answered, and the last ones' transactions gone.
	select {
	case <-time.After(time.Duration(seconds+answeredLinger+2) * time.Second):
	case <-e.ctx.Done():
		return 0, 0, 0, 0, e.ctx.Err()
	}
	fw, err := sys.guard.Metric(e.ctx, "cpsguard_calls_total", `outcome="forwarded"`)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	n = int(fw)
	if n < rate*seconds*99/100 {
		return 0, 0, 0, 0, fmt.Errorf("%d of %d calls forwarded (see %s)", n, rate*seconds, dir)
	}
	if held, err = liveHeap("heap-held.pb.gz"); err != nil {
		return 0, 0, 0, 0, err
	}
	rss, _ = procs.RSS(sys.pid)
	return idle, held, rss, n, nil
}
