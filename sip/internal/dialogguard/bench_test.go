package dialogguard

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"
)

// BenchmarkAdmit is one request through the guard (the rate bound
// lifted, so that each takes the path of one that passes).
//
//	go test ./sip/internal/dialogguard/ -run '^$' -bench Admit -benchmem
func BenchmarkAdmit(b *testing.B) {
	g := New(1e15, 1e15)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if g.Admit(Key{1}, Key{1}, fromPeer, 0, 0, now) != Pass {
			b.Fatal("refused")
		}
	}
}

// BenchmarkCollectFullDialogTables is a full collection of a heap that
// holds a node's per-dialog tables at their bound: the ended dialogs and
// the ended tokens (2×262,144 ends, what a node at a few hundred answered
// CPS keeps for the tokens' lifetime) and the dialogs' rate buckets
// (262,144): the share of every mark phase these tables cost (and, as
// tables-MiB, the heap they take). Their entries hold no pointer, so the collector skips them; with time.Time
// fields (a Location pointer each) and a pointer per bucket it scanned
// all of them on every cycle.
//
//	go test ./sip/internal/dialogguard/ -run '^$' -bench CollectFullDialogTables -benchtime 20x -count 3
func BenchmarkCollectFullDialogTables(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := New(burst, rate)
	now := time.Now()
	exp := now.Add(4 * time.Hour)
	var k Key
	for i := range MaxEndedDialogs {
		binary.BigEndian.PutUint64(k[:], uint64(i))
		g.End(k, now, exp, uint64(i), fromPeer, copyFor, false)
	}
	for i := range MaxEndedTokens {
		binary.BigEndian.PutUint64(k[:], uint64(i)|1<<63)
		g.EndToken(k, now, exp, false)
	}
	var ck Key
	g.mu.Lock()
	for i := range MaxRates {
		binary.BigEndian.PutUint64(ck[:], uint64(i)|1<<62)
		g.admitLocked(ck, ck, fromPeer, 0, 0, now)
	}
	g.mu.Unlock()
	if n := len(g.rates); n != MaxRates {
		b.Fatalf("%d rate buckets, want %d", n, MaxRates)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ResetTimer()
	for range b.N {
		runtime.GC()
	}
	b.StopTimer()
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "tables-MiB")
	runtime.KeepAlive(g)
}
