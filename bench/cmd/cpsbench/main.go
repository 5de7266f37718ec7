package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// common flags of every experiment.
type env struct {
	out      string // bench/out
	results  string // bench/results (committed PNGs)
	cpsguard string // cpsguard binary
	kamCfg   string // bench/kamailio/relay.cfg
	runs     int
	ctx      context.Context
}

func (e *env) dir(parts ...string) string {
	p := filepath.Join(append([]string{e.out}, parts...)...)
	_ = os.MkdirAll(p, 0o755)
	return p
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	sub := os.Args[1]
	fs := flag.NewFlagSet(sub, flag.ExitOnError)
	e := &env{}
	fs.StringVar(&e.out, "out", "bench/out", "output `dir` for CSVs and logs")
	fs.StringVar(&e.results, "results", "bench/results", "`dir` for the PNGs")
	fs.StringVar(&e.cpsguard, "cpsguard", "bench/out/bin/cpsguard", "cpsguard `binary`")
	fs.StringVar(&e.kamCfg, "kamailio-cfg", "bench/kamailio/relay.cfg", "Kamailio `config`")
	fs.IntVar(&e.runs, "runs", 3, "repetitions (the median is reported)")
	gogc := fs.String("node-gogc", "", "GOGC for the cpsguard process (A/B of GC settings; default: the node's own, GOGC=400 since internal/gctune)")
	inflight := fs.String("node-max-inflight", "", "sip.max_inflight written into every node's config (default: the experiment's own, usually the node's default)")
	shareBy := fs.String("node-share-by", "", "carriers[].share_by written into every node's config: customer, peer or none (default: the node's default, none)")
	procs := fs.String("node-gomaxprocs", "", "GOMAXPROCS for the cpsguard process (how the node scales with cores; default: every core)")

	var run func(*env) error
	switch sub {
	case "accuracy":
		run = accuracyCmd(fs)
	case "throughput":
		run = throughputCmd(fs)
	case "latency":
		run = latencyCmd(fs)
	case "pacing":
		run = pacingCmd(fs)
	case "decisions":
		run = decisionsCmd(fs)
	case "memory":
		run = memoryCmd(fs)
	case "held":
		run = heldCmd(fs)
	case "profile":
		run = profileCmd(fs)
	case "adaptive":
		run = adaptiveCmd(fs)
	case "overload":
		run = overloadCmd(fs)
	default:
		usage()
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:])
	if *gogc != "" {
		// Read by the started node's runtime, not by this process's (the
		// runtime read GOGC at its own start).
		_ = os.Setenv("GOGC", *gogc)
		fmt.Println("cpsguard runs with GOGC=" + *gogc)
	}
	if *inflight != "" {
		_ = os.Setenv("CPSBENCH_MAX_INFLIGHT", *inflight)
		fmt.Println("cpsguard runs with sip.max_inflight " + *inflight)
	}
	if *shareBy != "" {
		_ = os.Setenv("CPSBENCH_SHARE_BY", *shareBy)
		fmt.Println("cpsguard runs with carriers[].share_by " + *shareBy)
	}
	if *procs != "" {
		// Likewise read by the node only; SIPp, Redis and Kamailio ignore it.
		_ = os.Setenv("GOMAXPROCS", *procs)
		fmt.Println("cpsguard runs with GOMAXPROCS=" + *procs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e.ctx = ctx
	if e.runs < 1 {
		e.runs = 1
	}
	// Absolute paths: kamailio changes its working directory.
	for _, p := range []*string{&e.out, &e.results, &e.cpsguard, &e.kamCfg} {
		if a, err := filepath.Abs(*p); err == nil {
			*p = a
		}
	}
	machine()
	start := time.Now()
	if err := run(e); err != nil {
		fmt.Fprintf(os.Stderr, "cpsbench %s: %v\n", sub, err)
		os.Exit(1)
	}
	fmt.Printf("\n%s done in %s; load after: %s\n", sub, time.Since(start).Round(time.Second), load())
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cpsbench accuracy|throughput|latency|pacing|decisions|memory|held|profile|adaptive|overload [flags]")
}

// machine prints what the figures were measured on.
func machine() {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Printf("machine: %d CPUs (%s), %s; load: %s\n", runtime.NumCPU(), model, runtime.Version(), load())
}

// load returns the 1/5/15-minute load averages.
func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// tool returns the path of a binary or an error naming the package.
func tool(name, pkg string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (apt-get install %s)", name, pkg)
	}
	return p, nil
}
