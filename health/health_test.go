package health

import (
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) add(c Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *recorder) list() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Change(nil), r.changes...)
}

func newTracker(t *testing.T) (*Tracker, *recorder, *time.Time) {
	t.Helper()
	now := time.Unix(1_000_000, 0)
	rec := &recorder{}
	tr := NewTracker(func() time.Time { return now }, rec.add)
	tr.Sync(map[string]Policy{
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
	tr.Probed("a", true, "200 OK") // resets the count
	tr.Probed("a", false, "no answer in 1s")
	tr.Probed("a", false, "no answer in 1s")
	if !tr.Up("a") {
		t.Fatal("down after a good probe broke the series, want up")
	}
	*now = now.Add(5 * time.Second)
	tr.Probed("a", false, "503 Service Unavailable")
	if tr.Up("a") {
		t.Fatal("up after 3 failed probes in a row, want down")
	}
	st, _ := tr.State("a")
	if st.Up || !st.Since.Equal(*now) || st.Reason != "probe: 3 failures in a row (last: 503 Service Unavailable)" {
		t.Errorf("state = %+v", st)
	}
	tr.Probed("a", true, "200 OK")
	if tr.Up("a") {
		t.Fatal("up after 1 good probe, want down until up_after (2)")
	}
	tr.Probed("a", false, "no answer in 1s")
	tr.Probed("a", true, "200 OK")
	if tr.Up("a") {
		t.Fatal("up after good probes not in a row, want down")
	}
	tr.Probed("a", true, "404 Not Found")
	if !tr.Up("a") {
		t.Fatal("down after 2 good probes in a row, want up")
	}
	got := rec.list()
	if len(got) != 2 || got[0].Up || !got[1].Up || got[1].Reason != "probe: 2 good answers in a row (404 Not Found)" {
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
	if !tr.Called("a", false, "500 Server Internal Error") {
		t.Fatal("3 failed calls in a row: no probe asked for")
	}
	if !tr.Up("a") {
		t.Fatal("calls alone marked the carrier down; a probe must confirm")
	}
	if tr.Called("a", false, "500 Server Internal Error") {
		t.Error("a second probe asked for while the first is pending")
	}
	// The carrier answers its probe: the calls' failures were the calls'
	// (a peer dialling numbers the carrier refuses), not the carrier's.
	tr.Probed("a", true, "200 OK")
	if !tr.Up("a") {
		t.Fatal("a good confirming probe left the carrier down")
	}
	for i := range 3 {
		if tr.Called("a", false, "503 Service Unavailable") {
			t.Fatalf("failed call %d: a second confirmation within the probe interval", i+1)
		}
	}
	*now = now.Add(5 * time.Second) // one confirmation per interval at most
	for i := range 3 {
		if got := tr.Called("a", false, "503 Service Unavailable"); got != (i == 0) {
			t.Fatalf("failed call %d, an interval later: probe asked %v", i+1, got)
		}
	}
	// One lost answer does not decide: down_after failed probes in a row.
	if !tr.Probed("a", false, "no answer in 1s") || !tr.Probed("a", false, "no answer in 1s") {
		t.Fatal("a failed confirming probe did not ask for the next one")
	}
	if !tr.Up("a") {
		t.Fatal("down before down_after (3) confirming probes failed")
	}
	if tr.Probed("a", false, "no answer in 1s") {
		t.Error("the deciding probe asked for another")
	}
	if tr.Up("a") {
		t.Fatal("3 failed confirming probes left the carrier up")
	}
	ch := rec.list()
	if len(ch) != 1 || ch[0].Reason != "calls: 6 failures in a row (last: 503 Service Unavailable), confirmed by 3 failed probes (last: no answer in 1s)" {
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
	// Only good probes bring it back, not a call result.
	tr.Called("a", true, "200 OK")
	if tr.Up("a") {
		t.Error("a call result brought a down carrier up, want only probes to")
	}
	tr.Probed("a", true, "200 OK")
	tr.Probed("a", true, "200 OK")
	if !tr.Up("a") {
		t.Error("2 good probes did not bring it up")
	}
}

func TestSyncKeepsStateAndForgets(t *testing.T) {
	tr, rec, _ := newTracker(t)
	for range 3 {
		tr.Probed("a", false, "no answer")
	}
	tr.Sync(map[string]Policy{"a": {Enabled: true, DownAfter: 5, UpAfter: 1}, "b": {Enabled: true, DownAfter: 1, UpAfter: 1}})
	if tr.Up("a") {
		t.Error("a reload brought a down carrier up, want it kept down")
	}
	if !tr.Up("b") {
		t.Error("a new carrier starts down, want up")
	}
	tr.Probed("a", true, "200 OK") // UpAfter is 1 now
	if !tr.Up("a") {
		t.Error("the new policy (up_after 1) was not applied")
	}
	for range 5 {
		tr.Probed("a", false, "no answer")
	}
	tr.Sync(map[string]Policy{"a": {Enabled: false}})
	if !tr.Up("a") {
		t.Error("turning probing off left the carrier down, want up")
	}
	if _, ok := tr.State("b"); ok {
		t.Error("a carrier no longer configured is still known")
	}
	if n := len(rec.list()); n != 4 {
		t.Errorf("got %d changes, want 4 (down, up, down, up)", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	tr := NewTracker(nil, nil)
	pol := map[string]Policy{"a": {Enabled: true, DownAfter: 2, UpAfter: 2}}
	tr.Sync(pol)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 500 {
				ok := (i+j)%3 == 0
				tr.Probed("a", ok, "x")
				tr.Called("a", ok, "x")
				_ = tr.Up("a")
				if j%100 == 0 {
					tr.Sync(pol)
				}
			}
		}()
	}
	wg.Wait()
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
	tr.Probed("a", true, "200 OK")
	for range 3 {
		*now = now.Add(time.Minute)
		tr.Probed("a", false, "no answer in 1s")
	}
	if tr.Up("a") {
		t.Error("probes count again after one was answered, and no call since: want down")
	}
}
