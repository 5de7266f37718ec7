package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"time"

	"github.com/cpsguard/cpsguard/bench/internal/sipbench"
	"github.com/cpsguard/cpsguard/bench/internal/stats"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5070", "UDP `address` to answer on")
	dur := flag.Duration("for", 60*time.Second, "stop after this long (bounded run)")
	out := flag.String("out", "bench/out/sink.csv", "CSV `file` of INVITE arrivals")
	analyze := flag.String("analyze", "", "analyse an arrivals CSV `file` instead of listening")
	cps := flag.Float64("cps", 0, "expected calls per second, for inter-arrival analysis")
	flag.Parse()

	if *analyze != "" {
		ts, err := readArrivals(*analyze)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sink:", err)
			os.Exit(1)
		}
		report(ts, *cps)
		return
	}

	s, err := sipbench.NewSink(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	fmt.Fprintf(os.Stderr, "sink: answering on %s for %s\n", s.Addr(), *dur)
	s.Run(ctx)

	arr := s.Arrivals()
	rows := make([][]string, len(arr))
	ts := make([]time.Time, len(arr))
	for i, a := range arr {
		rows[i] = []string{a.CallID, strconv.FormatInt(a.At.UnixNano(), 10)}
		ts[i] = a.At
	}
	if err := stats.WriteCSV(*out, []string{"call_id", "unix_ns"}, rows); err != nil {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(1)
	}
	fmt.Printf("stats: %+v\n", s.Stats())
	report(ts, *cps)
}

func readArrivals(path string) ([]time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	var ts []time.Time
	for i, r := range recs {
		if i == 0 || len(r) < 2 {
			continue
		}
		ns, err := strconv.ParseInt(r[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		ts = append(ts, time.Unix(0, ns))
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts, nil
}

func report(ts []time.Time, cps float64) {
	if len(ts) == 0 {
		fmt.Println("no INVITEs")
		return
	}
	maxW, at := siptest.MaxInWindowAt(ts, time.Second)
	span := ts[len(ts)-1].Sub(ts[0])
	t := stats.Table{Header: []string{"calls", "span_s", "mean_cps", "max_in_sliding_1s", "at_s"}}
	t.Add(len(ts), span.Seconds(), float64(len(ts)-1)/span.Seconds(), maxW, at.Sub(ts[0]).Seconds())
	t.Print(os.Stdout)
	fmt.Println("per second:", stats.PerSecond(ts, ts[0]))
	g := stats.Gaps(ts)
	if len(g) > 0 {
		gt := stats.Table{Header: []string{"inter_arrival", "p1_ms", "p50_ms", "p99_ms", "max_ms", "ideal_ms"}}
		ideal := "-"
		if cps > 0 {
			ideal = stats.Ms(time.Duration(float64(time.Second) / cps))
		}
		gt.Add("", stats.Pct(g, 1), stats.Pct(g, 50), stats.Pct(g, 99), stats.Max(g), ideal)
		gt.Print(os.Stdout)
	}
}
