package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// A slow call is one whose INVITE took longer than slowCall from the
// caller to the carrier; slow calls sent less than stallGap apart form one
// stall.
const (
	slowCall = 3 * time.Millisecond
	stallGap = 50 * time.Millisecond
	// gcAfter counts a call sent this soon after a mark phase ended as
	// delayed by it (the queue the mark left behind is still draining).
	gcAfter = 20 * time.Millisecond
)

// sentCall is one measured call: when its INVITE left the caller (wall
// clock) and how long it took to reach the carrier.
type sentCall struct {
	sent    time.Time
	forward time.Duration
}

// span is a wall-clock interval.
type span struct{ from, to time.Time }

// nodeTrace is what stallReport reads from a node's execution trace
// (runtime/trace, /debug/pprof/trace of the cpsguardprof build): its GC
// mark phases, and per millisecond the CPU time of each goroutine kind
// (named by the function its goroutine started in).
type nodeTrace struct {
	marks []span
	busy  map[int64]map[string]time.Duration // Unix ms -> kind -> CPU
}

// readNodeTrace parses an execution trace. Its times are mapped to the
// wall clock by the trace's clock snapshots (Go 1.25 and later).
func readNodeTrace(path string) (*nodeTrace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return nil, err
	}
	nt := &nodeTrace{busy: map[int64]map[string]time.Duration{}}
	var off int64 // wall ns minus trace ns; 0 until the first snapshot
	kind := map[trace.GoID]string{}
	running := map[trace.GoID]trace.Time{}
	var markFrom time.Time
	wall := func(t trace.Time) time.Time { return time.Unix(0, int64(t)+off) }
	add := func(g trace.GoID, from, to trace.Time) {
		for t := from; t < to; {
			ms := wall(t).UnixMilli()
			end := min(to, trace.Time((ms+1)*1e6-off))
			if end <= t { // a clock step: count the rest in this millisecond
				end = to
			}
			m := nt.busy[ms]
			if m == nil {
				m = map[string]time.Duration{}
				nt.busy[ms] = m
			}
			m[kind[g]] += time.Duration(end - t)
			t = end
		}
	}
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch ev.Kind() {
		case trace.EventSync:
			if s := ev.Sync(); off == 0 && s.ClockSnapshot != nil {
				off = s.ClockSnapshot.Wall.UnixNano() - int64(s.ClockSnapshot.Trace)
			}
		case trace.EventRangeBegin, trace.EventRangeEnd:
			if off == 0 || ev.Range().Name != "GC concurrent mark phase" {
				continue
			}
			if ev.Kind() == trace.EventRangeBegin {
				markFrom = wall(ev.Time())
			} else if !markFrom.IsZero() {
				nt.marks = append(nt.marks, span{markFrom, wall(ev.Time())})
				markFrom = time.Time{}
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine || off == 0 {
				continue
			}
			g := st.Resource.Goroutine()
			if _, ok := kind[g]; !ok {
				kind[g] = goroutineKind(st.Stack)
				if kind[g] == "" {
					kind[g] = goroutineKind(ev.Stack())
				}
			}
			from, to := st.Goroutine()
			if to == trace.GoRunning {
				running[g] = ev.Time()
			} else if from == trace.GoRunning {
				if t, ok := running[g]; ok {
					add(g, t, ev.Time())
					delete(running, g)
				}
			}
		}
	}
	if off == 0 {
		return nil, fmt.Errorf("%s: no clock snapshot (a trace of Go 1.25 or later is needed)", path)
	}
	return nt, nil
}

// goroutineKind names a goroutine by the outermost function of its stack
// that is not a wrapper (WaitGroup.Go, pprof.Do, a closure of Serve).
func goroutineKind(s trace.Stack) string {
	var fs []string
	for f := range s.Frames() {
		fs = append(fs, f.Func)
	}
	for i := len(fs) - 1; i >= 0; i-- {
		n := fs[i]
		if n == "sync.(*WaitGroup).Go.func1" || n == "runtime/pprof.Do" || strings.Contains(n, "Proxy).Serve.func") {
			continue
		}
		n = strings.TrimPrefix(n, "github.com/cpsguard/cpsguard/")
		return strings.TrimPrefix(n, "github.com/emiago/sipgo/")
	}
	return ""
}

// inMark reports whether t falls in a mark phase or within gcAfter of
// its end.
func (nt *nodeTrace) inMark(t time.Time) bool {
	for _, m := range nt.marks {
		if !t.Before(m.from) && t.Before(m.to.Add(gcAfter)) {
			return true
		}
	}
	return false
}

// top returns the goroutine kinds that used the most CPU from from to to,
// most first, at most n, with their CPU.
func (nt *nodeTrace) top(from, to time.Time, n int) string {
	sum := map[string]time.Duration{}
	for ms := from.UnixMilli(); ms <= to.UnixMilli(); ms++ {
		for k, d := range nt.busy[ms] {
			sum[k] += d
		}
	}
	type kv struct {
		k string
		d time.Duration
	}
	var l []kv
	for k, d := range sum {
		l = append(l, kv{k, d})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].d > l[j].d })
	var b strings.Builder
	for i, x := range l {
		if i == n {
			break
		}
		fmt.Fprintf(&b, " %s %.1fms;", x.k, float64(x.d)/1e6)
	}
	return b.String()
}

// stallReport groups the slow calls into stalls and says, for each, whether
// a GC mark phase was running and what the node ran from 5 ms before it
// began to its end; its first line is the summary.
func stallReport(nt *nodeTrace, calls []sentCall) string {
	sort.Slice(calls, func(i, j int) bool { return calls[i].sent.Before(calls[j].sent) })
	var slow, inGC int
	var stalls [][]sentCall
	for _, c := range calls {
		if c.forward <= slowCall {
			continue
		}
		slow++
		if nt.inMark(c.sent) {
			inGC++
		}
		if n := len(stalls); n > 0 && c.sent.Sub(stalls[n-1][len(stalls[n-1])-1].sent) < stallGap {
			stalls[n-1] = append(stalls[n-1], c)
		} else {
			stalls = append(stalls, []sentCall{c})
		}
	}
	var b strings.Builder
	pct := 0.0
	if slow > 0 {
		pct = 100 * float64(inGC) / float64(slow)
	}
	fmt.Fprintf(&b, "%d of %d calls over %v to the carrier; %d of them (%.0f %%) sent during a GC mark phase or within %v of its end; %d mark phases, %d stalls\n",
		slow, len(calls), slowCall, inGC, pct, gcAfter, len(nt.marks), len(stalls))
	t0 := time.Time{}
	if len(calls) > 0 {
		t0 = calls[0].sent
	}
	for _, m := range nt.marks {
		fmt.Fprintf(&b, "mark phase at +%v for %v\n", m.from.Sub(t0).Round(time.Millisecond), m.to.Sub(m.from).Round(time.Millisecond))
	}
	for _, s := range stalls {
		first, last := s[0].sent, s[len(s)-1].sent
		var worst time.Duration
		gc := ""
		for _, c := range s {
			worst = max(worst, c.forward)
			if nt.inMark(c.sent) {
				gc = " [GC mark]"
			}
		}
		fmt.Fprintf(&b, "stall at +%v: %d calls over %v, worst %v%s; node CPU:%s\n",
			first.Sub(t0).Round(time.Millisecond), len(s), last.Sub(first).Round(time.Millisecond),
			worst.Round(100*time.Microsecond), gc, nt.top(first.Add(-5*time.Millisecond), last, 4))
	}
	return b.String()
}
