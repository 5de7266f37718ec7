package carriers

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type recorder struct {
	mu      sync.Mutex
	changes []healthChange
}

func (r *recorder) add(c healthChange) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *recorder) list() []healthChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]healthChange(nil), r.changes...)
}

func newTracker(t *testing.T) (*healthTracker, *recorder, *time.Time) {
	t.Helper()
	now := time.Unix(1_000_000, 0)
	rec := &recorder{}
	tr := newHealthTracker(func() time.Time { return now }, rec.add)
	tr.Sync(map[string]healthPolicy{
		"a":   {Enabled: true, DownAfter: 3, UpAfter: 2, Interval: 5 * time.Second},
		"off": {Enabled: false, DownAfter: 3, UpAfter: 2},
	})
	return tr, rec, &now
}

func TestProbesMarkDownAndUp(t *testing.T) {
	tr, rec, now := newTracker(t)
	if !tr.Up("a") {
		t.Fatal("a new carrier is down, want up")
	}
	tr.Probed("a", false, "no answer in 1s")
	tr.Probed("a", false, "no answer in 1s")
	if !tr.Up("a") {
		t.Fatal("down after 2 failed probes, want up until down_after (3)")
	}
	tr.Probed("a", true, "answered 200") // resets the count
	tr.Probed("a", false, "no answer in 1s")
	tr.Probed("a", false, "no answer in 1s")
	if !tr.Up("a") {
		t.Fatal("down after a good probe broke the series, want up")
	}
	*now = now.Add(5 * time.Second)
	tr.Probed("a", false, "answered 503")
	if tr.Up("a") {
		t.Fatal("up after 3 failed probes in a row, want down")
	}
	st, _ := tr.health("a")
	if st.Up || !st.Since.Equal(*now) || st.Reason != "probe: 3 failures in a row (last: answered 503)" {
		t.Errorf("state = %+v", st)
	}
	tr.Probed("a", true, "answered 200")
	if tr.Up("a") {
		t.Fatal("up after 1 good probe, want down until up_after (2)")
	}
	tr.Probed("a", false, "no answer in 1s")
	tr.Probed("a", true, "answered 200")
	if tr.Up("a") {
		t.Fatal("up after good probes not in a row, want down")
	}
	tr.Probed("a", true, "answered 404")
	if !tr.Up("a") {
		t.Fatal("down after 2 good probes in a row, want up")
	}
	got := rec.list()
	if len(got) != 2 || got[0].Up || !got[1].Up || got[1].Reason != "probe: 2 good answers in a row (answered 404)" {
		t.Errorf("changes = %+v, want down then up", got)
	}
}

func TestCallsAskForAProbeThatDecides(t *testing.T) {
	tr, rec, now := newTracker(t)
	for range 2 {
		if tr.Called("a", false, "setup timeout") {
			t.Fatal("a probe asked for before down_after failed calls")
		}
	}
	tr.Called("a", true, "180 Ringing")
	for range 2 {
		tr.Called("a", false, "setup timeout")
	}
	if !tr.Up("a") {
		t.Fatal("down after failures not in a row, want up")
	}
	suspected := *now
	if !tr.Called("a", false, "answered 500") {
		t.Fatal("3 failed calls in a row: no probe asked for")
	}
	if tr.Up("a") {
		t.Fatal("3 failed calls in a row left the carrier up; want it down at once while probes confirm")
	}
	if st, _ := tr.health("a"); !st.Since.Equal(suspected) || st.Reason != "calls: 3 failures in a row (last: answered 500), confirming with 3 probes" {
		t.Errorf("suspected: %+v", st)
	}
	if tr.Called("a", false, "answered 500") {
		t.Error("a second probe asked for while the first is pending")
	}
	// The carrier answers its probe: the calls' failures were the calls'
	// (a peer dialling numbers the carrier refuses), not the carrier's.
	// It was only suspected: back at once, not after up_after answers.
	tr.Probed("a", true, "answered 200")
	if !tr.Up("a") {
		t.Fatal("a good confirming probe left the carrier down")
	}
	if ch := rec.list(); len(ch) != 2 || !ch[0].Suspect || ch[0].Up || !ch[1].Up {
		t.Errorf("changes = %+v, want suspected down, then up", ch)
	}
	rec.changes = nil
	for i := range 3 {
		if tr.Called("a", false, "answered 503") {
			t.Fatalf("failed call %d: a second confirmation within the probe interval", i+1)
		}
	}
	*now = now.Add(5 * time.Second) // one confirmation per interval at most
	for i := range 3 {
		if got := tr.Called("a", false, "answered 503"); got != (i == 0) {
			t.Fatalf("failed call %d, an interval later: probe asked %v", i+1, got)
		}
	}
	suspected = *now
	// One lost answer does not decide: down_after failed probes in a row.
	if !tr.Probed("a", false, "no answer in 1s") || !tr.Probed("a", false, "no answer in 1s") {
		t.Fatal("a failed confirming probe did not ask for the next one")
	}
	if !tr.Confirming("a") {
		t.Fatal("not confirming before down_after (3) confirming probes failed")
	}
	*now = now.Add(time.Second)
	if tr.Probed("a", false, "no answer in 1s") {
		t.Error("the deciding probe asked for another")
	}
	if tr.Up("a") || tr.Confirming("a") {
		t.Fatal("3 failed confirming probes did not confirm the carrier down")
	}
	if st, _ := tr.health("a"); !st.Since.Equal(suspected) {
		t.Errorf("confirmed down since %v, want since its calls took it down (%v)", st.Since, suspected)
	}
	ch := rec.list()
	if len(ch) != 2 || !ch[0].Suspect || !ch[1].Confirmed || ch[1].Reason != "calls: 6 failures in a row (last: answered 503), confirmed by 3 failed probes (last: no answer in 1s)" {
		t.Errorf("changes = %+v", ch)
	}
	for range 10 {
		tr.Called("off", false, "setup timeout")
		tr.Probed("off", false, "no answer")
		if tr.Called("unknown", false, "setup timeout") {
			t.Error("a probe asked for an unknown carrier")
		}
	}
	if !tr.Up("off") || !tr.Up("unknown") {
		t.Error("a carrier with probing off, or unknown, went down; want always up")
	}
	// Confirmed down: only good probes bring it back, not a call result.
	tr.Called("a", true, "answered 200")
	if tr.Up("a") {
		t.Error("a call result brought a down carrier up, want only probes to")
	}
	tr.Probed("a", true, "answered 200")
	tr.Probed("a", true, "answered 200")
	if !tr.Up("a") {
		t.Error("2 good probes did not bring it up")
	}
}

func TestSyncKeepsStateAndForgets(t *testing.T) {
	tr, rec, _ := newTracker(t)
	for range 3 {
		tr.Probed("a", false, "no answer")
	}
	tr.Sync(map[string]healthPolicy{"a": {Enabled: true, DownAfter: 5, UpAfter: 1}, "b": {Enabled: true, DownAfter: 1, UpAfter: 1}})
	if tr.Up("a") {
		t.Error("a reload brought a down carrier up, want it kept down")
	}
	if !tr.Up("b") {
		t.Error("a new carrier starts down, want up")
	}
	tr.Probed("a", true, "answered 200") // UpAfter is 1 now
	if !tr.Up("a") {
		t.Error("the new policy (up_after 1) was not applied")
	}
	for range 5 {
		tr.Probed("a", false, "no answer")
	}
	tr.Sync(map[string]healthPolicy{"a": {Enabled: false}})
	if !tr.Up("a") {
		t.Error("turning probing off left the carrier down, want up")
	}
	if _, ok := tr.health("b"); ok {
		t.Error("a carrier no longer configured is still known")
	}
	if n := len(rec.list()); n != 4 {
		t.Errorf("got %d changes, want 4 (down, up, down, up)", n)
	}
}

// TestConcurrentUse: one healthTracker shared by goroutines that each feed
// their own carrier a scripted series of probe and call results, one
// more that hammers a carrier they all share, and one that reloads
// (Sync, same policies) and reads State all along. Each goroutine's
// carrier must end exactly where a private healthTracker fed the same script
// alone ends, step by step (Up, and every return value), and with the
// same changes reported in the same order: other carriers, concurrent
// reads and reloads change nothing. The shared carrier's changes
// alternate down, up, down, … and its final state is its last change's.
// Run with -race.
func TestConcurrentUse(t *testing.T) {
	const workers, steps = 4, 600
	frozen := time.Unix(1_000_000, 0)
	clock := func() time.Time { return frozen }
	pol := func(n int) map[string]healthPolicy {
		m := map[string]healthPolicy{"shared": {Enabled: true, DownAfter: 2, UpAfter: 2}}
		for i := range n {
			m[fmt.Sprintf("c%d", i)] = healthPolicy{Enabled: true, DownAfter: 1 + i%3, UpAfter: 1 + (i+1)%3, Interval: time.Duration(i%2) * time.Second}
		}
		return m
	}
	rec := &recorder{}
	tr := newHealthTracker(clock, rec.add)
	tr.Sync(pol(workers))

	type step struct {
		probe, ok bool
	}
	script := func(seed int) []step {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		out := make([]step, steps)
		for k := range out {
			// Runs of failures long enough to take a carrier down, and of
			// good answers to bring it back.
			out[k] = step{probe: r.IntN(3) > 0, ok: (k/5)%2 == 0 || r.IntN(4) == 0}
		}
		return out
	}
	var wg sync.WaitGroup
	errs := make(chan string, workers+2)
	var done atomic.Int32
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			name := fmt.Sprintf("c%d", i)
			refRec := &recorder{}
			ref := newHealthTracker(clock, refRec.add)
			ref.Sync(map[string]healthPolicy{name: pol(workers)[name]})
			for k, s := range script(i) {
				var got, want bool
				if s.probe {
					got, want = tr.Probed(name, s.ok, "d"), ref.Probed(name, s.ok, "d")
				} else {
					got, want = tr.Called(name, s.ok, "d"), ref.Called(name, s.ok, "d")
				}
				if got != want || tr.Up(name) != ref.Up(name) {
					errs <- fmt.Sprintf("%s step %d (%+v): returned %v up %v, alone: %v up %v", name, k, s, got, tr.Up(name), want, ref.Up(name))
					return
				}
				// Everyone also feeds the shared carrier.
				if s.probe {
					tr.Probed("shared", s.ok, "s")
				} else {
					tr.Called("shared", s.ok, "s")
				}
				_ = tr.Up("shared")
			}
			var mine []healthChange
			for _, c := range rec.list() {
				if c.Carrier == name {
					mine = append(mine, c)
				}
			}
			if want := refRec.list(); !reflect.DeepEqual(mine, want) || len(want) < 2 {
				errs <- fmt.Sprintf("%s: changes %+v, alone %+v (want the same, at least a down and an up)", name, mine, want)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < 100000 && done.Load() < workers; n++ {
			tr.Sync(pol(workers))
			for i := range workers {
				if st, ok := tr.health(fmt.Sprintf("c%d", i)); !ok {
					errs <- fmt.Sprintf("c%d unknown after a reload: %+v", i, st)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	up, changes := true, 0
	for _, c := range rec.list() {
		if c.Carrier != "shared" || c.Notice || c.Confirmed {
			continue
		}
		if c.Up == up {
			t.Fatalf("shared carrier: change %d to up=%v while already up=%v (changes must alternate)", changes, c.Up, up)
		}
		up = c.Up
		changes++
	}
	st, _ := tr.health("shared")
	if st.Up != up || tr.Up("shared") != up {
		t.Errorf("shared carrier: State %+v, Up %v; want up=%v, its last change", st, tr.Up("shared"), up)
	}
	if changes == 0 {
		t.Error("shared carrier never changed state: the test exercised nothing")
	}
	t.Logf("shared carrier: %d changes of state", changes)
}

// A carrier that answers calls but drops OPTIONS is not taken out of
// service by its probes: their failures are ignored (one notice) until a
// probe is answered.
func TestProbesIgnoredWhileCallsAreAnswered(t *testing.T) {
	tr, rec, now := newTracker(t)
	tr.Called("a", true, "")
	for range 3 {
		*now = now.Add(time.Second)
		tr.Probed("a", false, "no answer in 1s")
	}
	if !tr.Up("a") {
		t.Fatal("probes took down a carrier whose calls are answered")
	}
	ch := rec.list()
	if len(ch) != 1 || !ch[0].Notice || !ch[0].Up {
		t.Fatalf("changes = %+v, want one notice", ch)
	}
	for range 20 { // hours of idle: still up, no more notices
		*now = now.Add(5 * time.Second)
		tr.Probed("a", false, "no answer in 1s")
		if tr.Called("a", false, "setup timeout") {
			t.Fatal("a confirmation asked for by probes known to fail")
		}
	}
	if !tr.Up("a") || len(rec.list()) != 1 {
		t.Fatalf("up %v, changes %+v", tr.Up("a"), rec.list())
	}
	// A probe answered: probes count again.
	tr.Probed("a", true, "answered 200")
	for range 3 {
		*now = now.Add(time.Minute)
		tr.Probed("a", false, "no answer in 1s")
	}
	if tr.Up("a") {
		t.Error("probes count again after one was answered, and no call since: want down")
	}
}

// While failed calls are being confirmed, a call already under way that
// the carrier answers brings it back at once.
func TestAnsweredCallEndsSuspicion(t *testing.T) {
	tr, rec, _ := newTracker(t)
	for range 3 {
		tr.Called("a", false, "no ringing within 2s")
	}
	if tr.Up("a") {
		t.Fatal("3 setup timeouts in a row: still up")
	}
	tr.Called("a", true, "")
	if !tr.Up("a") || tr.Confirming("a") {
		t.Fatal("an answered call left a suspected carrier down")
	}
	// The probes that come back now are a regular series again.
	tr.Probed("a", false, "no answer in 1s")
	if !tr.Up("a") {
		t.Error("one failed probe after the suspicion ended took the carrier down")
	}
	if ch := rec.list(); len(ch) != 2 || ch[1].Reason != "calls: answered while 3 failed calls in a row were confirmed: the failures were the calls'" {
		t.Errorf("changes = %+v", ch)
	}
}
