package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/procs"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
)

// sippResult is the last line of a SIPp -trace_stat file.
type sippResult struct {
	created, ok, failed, retrans int
	rate                         float64 // CallRate(C)
	elapsed                      float64 // s
	rt1ms                        float64 // ResponseTime1(C) in ms (mean)
}

func readSippStat(path string) (sippResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return sippResult{}, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comma = ';'
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return sippResult{}, err
	}
	if len(recs) < 2 {
		return sippResult{}, fmt.Errorf("%s: no statistics", path)
	}
	h, last := recs[0], recs[len(recs)-1]
	get := func(name string) string {
		for i, c := range h {
			if c == name && i < len(last) {
				return last[i]
			}
		}
		return ""
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	res := sippResult{
		created: atoi(get("TotalCallCreated")),
		ok:      atoi(get("SuccessfulCall(C)")),
		failed:  atoi(get("FailedCall(C)")),
		retrans: atoi(get("Retransmissions(C)")),
	}
	res.rate, _ = strconv.ParseFloat(get("CallRate(C)"), 64)
	res.elapsed = hmsSeconds(get("ElapsedTime(C)"))
	res.rt1ms = hmsSeconds(get("ResponseTime1(C)")) * 1000
	return res, nil
}

// hmsSeconds parses SIPp's HH:MM:SS[:uuuuuu] durations.
func hmsSeconds(s string) float64 {
	p := strings.Split(s, ":")
	if len(p) < 3 {
		return 0
	}
	h, _ := strconv.ParseFloat(p[0], 64)
	m, _ := strconv.ParseFloat(p[1], 64)
	sec, _ := strconv.ParseFloat(p[2], 64)
	v := h*3600 + m*60 + sec
	if len(p) == 4 {
		us, _ := strconv.ParseFloat(p[3], 64)
		v += us / 1e6
	}
	return v
}

// sippStep runs one SIPp UAS on uasPort and one SIPp UAC at rate for
// seconds against target; it returns the UAC and UAS statistics.
func sippStep(e *env, dir string, target string, uasPort, rate, seconds int) (uac, uas sippResult, err error) {
	return sippStepWith(e, dir, target, "uac.xml", uasPort, rate, seconds)
}

// sippStepWith is sippStep with the caller scenario uacScenario (a file
// of bench/sipp).
func sippStepWith(e *env, dir string, target, uacScenario string, uasPort, rate, seconds int) (uac, uas sippResult, err error) {
	sipp, err := tool("sipp", "sip-tester")
	if err != nil {
		return uac, uas, err
	}
	scen := filepath.Join(filepath.Dir(e.kamCfg), "..", "sipp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return uac, uas, err
	}
	timeout := strconv.Itoa(seconds+15) + "s"
	uasStat, uacStat := filepath.Join(dir, "uas-stat.csv"), filepath.Join(dir, "uac-stat.csv")
	os.Remove(uasStat)
	os.Remove(uacStat)
	os.Remove(filepath.Join(dir, "uac-errors.log"))
	os.Remove(filepath.Join(dir, "uas-errors.log"))
	us, err := procs.Start(sipp, filepath.Join(dir, "uas.log"), "-sf", filepath.Join(scen, "uas.xml"),
		"-i", "127.0.0.1", "-p", strconv.Itoa(uasPort), "-buff_size", "4194304", "-nostdin",
		"-trace_stat", "-stf", uasStat, "-fd", "1", "-timeout", timeout,
		"-trace_err", "-error_file", filepath.Join(dir, "uas-errors.log"))
	if err != nil {
		return uac, uas, err
	}
	defer us.Stop(2 * time.Second)
	time.Sleep(300 * time.Millisecond)
	uc, err := procs.Start(sipp, filepath.Join(dir, "uac.log"), "-sf", filepath.Join(scen, uacScenario),
		"-i", "127.0.0.1", "-p", strconv.Itoa(procs.FreeUDP()), "-r", strconv.Itoa(rate), "-m", strconv.Itoa(rate*seconds),
		"-buff_size", "4194304", "-nostdin", "-trace_stat", "-stf", uacStat, "-fd", "1",
		"-trace_err", "-error_file", filepath.Join(dir, "uac-errors.log"),
		"-timeout", timeout, target)
	if err != nil {
		return uac, uas, err
	}
	if !uc.Wait(time.Duration(seconds+25) * time.Second) {
		uc.Stop(2 * time.Second)
	}
	// Let the UAS see the last BYEs, then stop it (SIGTERM = final stats).
	time.Sleep(500 * time.Millisecond)
	us.Stop(3 * time.Second)
	uac, err = readSippStat(uacStat)
	if err != nil {
		return uac, uas, err
	}
	uas, _ = readSippStat(uasStat)
	return uac, uas, nil
}

type tpStep struct {
	system     string
	run, rate  int
	uac, uas   sippResult
	pass       bool
	cpuPer1k   float64 // CPU seconds of the system (node + its Redis) per 1,000 calls
	redisPer1k float64 // of which Redis
	try        int
}

func throughputCmd(fs *flag.FlagSet) func(*env) error {
	ratesFlag := fs.String("rates", "500,1000,1500,2000,2500,3000,3500,4000,5000,6000,7000,8000,10000,12000", "CPS steps of the ramp")
	seconds := fs.Int("seconds", 5, "seconds per step")
	systems := fs.String("systems", "cpsguard,kamailio", "systems to ramp")
	attempts := fs.Int("attempts", 2, "tries of a failing step before the ramp stops (a neighbour's burst on a shared box is not the system's ceiling)")
	uacScenario := fs.String("uac", "uac.xml", "caller scenario of bench/sipp (uac_txn.xml: transaction-aware, as operators run SIPp)")
	return func(e *env) error {
		var rates []int
		for _, s := range strings.Split(*ratesFlag, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return fmt.Errorf("bad -rates %q", *ratesFlag)
			}
			rates = append(rates, n)
		}
		fmt.Printf("throughput: SIPp ramp %v CPS (caller %s), %d s per step, -buff_size 4194304, UAS without 180; pass = every call 200+BYE done, 0 failed, 0 retransmissions (UAC and UAS), SIPp's call rate >= 95 %% of the step; a failing step is tried %d times\n", rates, *uacScenario, *seconds, *attempts)
		var steps []tpStep
		best := map[string][]float64{}
		for run := 1; run <= e.runs; run++ {
			for _, name := range strings.Split(*systems, ",") {
				top := 0
				for _, rate := range rates {
					if e.ctx.Err() != nil {
						return e.ctx.Err()
					}
					var st tpStep
					for try := 1; try <= max(*attempts, 1); try++ {
						var err error
						st, err = throughputStep(e, name, run, rate, *seconds, *uacScenario)
						if err != nil {
							return fmt.Errorf("%s run %d at %d: %w", name, run, rate, err)
						}
						st.try = try
						steps = append(steps, st)
						fmt.Printf("  %-9s run %d %5d CPS: ok %d/%d failed %d retrans uac %d uas %d, rate %.0f, cpu %.2f s/1k calls (redis %.2f) → %v (load %s)\n",
							name, run, rate, st.uac.ok, rate**seconds, st.uac.failed, st.uac.retrans, st.uas.retrans, st.uac.rate, st.cpuPer1k, st.redisPer1k, passWord(st.pass), load())
						if st.pass {
							break
						}
					}
					if !st.pass {
						break
					}
					top = rate
				}
				best[name] = append(best[name], float64(top))
			}
		}
		t := stats.Table{Header: []string{"system", "run", "rate", "try", "ok", "failed", "retrans_uac", "retrans_uas", "achieved_cps", "cpu_s_per_1k_calls", "of_which_redis", "pass"}}
		for _, s := range steps {
			t.Add(s.system, s.run, s.rate, s.try, s.uac.ok, s.uac.failed, s.uac.retrans, s.uas.retrans, s.uac.rate, s.cpuPer1k, s.redisPer1k, s.pass)
		}
		if err := t.WriteCSV(filepath.Join(e.out, "throughput-steps.csv")); err != nil {
			return err
		}
		sum := stats.Table{Header: []string{"system", "highest_clean_cps_per_run", "median"}}
		for _, name := range strings.Split(*systems, ",") {
			sum.Add(name, fmt.Sprint(best[name]), stats.Median(best[name]))
		}
		if g, k := stats.Median(best["cpsguard"]), stats.Median(best["kamailio"]); k > 0 {
			sum.Add("ratio cpsguard/kamailio", "", g/k)
		}
		fmt.Println()
		sum.Print(os.Stdout)
		if err := sum.WriteCSV(filepath.Join(e.out, "throughput.csv")); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(e.out, "throughput.csv"), "and throughput-steps.csv")
		return nil
	}
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// throughputStep starts the system fresh, runs one SIPp step through it
// and stops it.
func throughputStep(e *env, name string, run, rate, seconds int, uacScenario string) (tpStep, error) {
	dir := e.dir("throughput", fmt.Sprintf("%s-%d-%d", name, run, rate))
	uasPort := procs.FreeUDP()
	dest := "127.0.0.1:" + strconv.Itoa(uasPort)
	var sys *system
	var err error
	if name == "cpsguard" {
		sys, err = startCpsguardRedis(e, dir, procs.CpsguardOptions{
			PeerCPS: 100000, CarrierCPS: 100000, MaxWait: time.Second, Carrier: dest,
		})
	} else {
		sys, err = startKamailio(e, dir, dest, 0)
	}
	if err != nil {
		return tpStep{}, err
	}
	defer sys.stop()
	cpu0, r0 := treeCPU(sys), redisCPU(sys)
	uac, uas, err := sippStepWith(e, dir, sys.addr, uacScenario, uasPort, rate, seconds)
	if err != nil {
		return tpStep{}, err
	}
	cpu, rcpu := treeCPU(sys)-cpu0, redisCPU(sys)-r0
	if sys.guard != nil { // outcomes and store errors, to explain a failed step
		_ = os.WriteFile(filepath.Join(dir, "metrics.txt"), []byte(sys.guard.Scrape()), 0o644)
	}
	want := rate * seconds
	st := tpStep{system: name, run: run, rate: rate, uac: uac, uas: uas}
	if uac.ok > 0 {
		st.cpuPer1k = cpu / float64(uac.ok) * 1000
		st.redisPer1k = rcpu / float64(uac.ok) * 1000
	}
	// Rate reached: SIPp's average call rate over the whole step (creation
	// to the last call's end) within 5 % of the target.
	st.pass = uac.ok == want && uac.failed == 0 && uac.retrans == 0 && uas.retrans == 0 &&
		uac.rate >= 0.95*float64(rate)
	return st, nil
}

// treeCPU returns the CPU seconds used by the system's processes (all
// kamailio children; cpsguard plus its Redis).
func treeCPU(s *system) float64 {
	total := 0.0
	for _, pid := range childrenOf(s.pid) {
		total += procs.CPUTime(pid)
	}
	total += procs.CPUTime(s.pid)
	if s.redis != nil {
		total += procs.CPUTime(s.redis.Pid())
	}
	return total
}

func redisCPU(s *system) float64 {
	if s.redis == nil {
		return 0
	}
	return procs.CPUTime(s.redis.Pid())
}

// childrenOf lists the direct children of pid (kamailio's workers).
func childrenOf(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
