package carriers

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// healthPolicy is how one carrier is judged. A carrier whose healthPolicy is not
// Enabled is always up and its results are ignored.
type healthPolicy struct {
	// Enabled turns judging on (the carrier is probed).
	Enabled bool
	// DownAfter failed probes in a row, or failed calls in a row, mark the
	// carrier down (>= 1).
	DownAfter int
	// UpAfter good probes in a row mark a down carrier up (>= 1).
	UpAfter int
	// Interval is the probe interval: failed calls ask for at most one
	// confirmation per Interval, and a call answered within Interval ×
	// DownAfter vetoes a probe-only down.
	Interval time.Duration
}

// healthChange is one carrier going down or coming up.
type healthChange struct {
	// Carrier is the carrier's configured name.
	Carrier string
	// Up is the new state.
	Up bool
	// Reason says what decided it ("probe: no answer in 1s", "calls: 3
	// setup timeouts in a row", …).
	Reason string
	// Notice marks a change of judgement, not of state (Up is unchanged):
	// the carrier's probe failures are ignored from now on because its
	// calls are answered (it does not answer OPTIONS).
	Notice bool
	// Suspect marks a carrier taken down at once by its failed calls while
	// probes confirm them; Confirmed, one the probes confirmed down (it
	// was down already: the reason changes, not the state).
	Suspect, Confirmed bool
}

// Health is what the healthTracker believes of one carrier.
type Health struct {
	// Up reports whether calls may be sent to the carrier.
	Up bool
	// Since is when the carrier entered this state (the healthTracker's clock).
	Since time.Time
	// Reason says why it is in this state (empty for a carrier that has
	// been up since it was configured).
	Reason string
}

type healthState struct {
	up atomic.Bool // read without the healthTracker's mutex

	// Guarded by healthTracker.mu.
	pol        healthPolicy
	probeFails int
	probeOKs   int
	callFails  int
	// confirming: calls failed DownAfter times in a row, the carrier is
	// down at once (suspected) and probes were asked for; DownAfter
	// failed probes in a row confirm it down, a good one (or an answered
	// call) brings it back at once: it was never confirmed.
	confirming  bool
	lastConfirm time.Time // when the last confirmation began
	lastCall    string    // the last failed call, for the reason
	// lastGoodCall is when a forwarded call was last answered; a carrier
	// answering calls while its probes fail does not answer OPTIONS, and
	// probesIgnored then holds until a probe is answered.
	lastGoodCall  time.Time
	probesIgnored bool
	since         time.Time
	reason        string
}

// healthTracker holds the health of the configured carriers.
type healthTracker struct {
	clock    func() time.Time
	onChange func(healthChange)

	mu       sync.Mutex
	carriers atomic.Pointer[map[string]*healthState] // replaced whole by Sync
}

// newHealthTracker returns a healthTracker that knows no carrier yet. onChange (may be
// nil) is called, with the healthTracker's mutex held, for every change of state;
// it must be quick and must not call the healthTracker. clock nil means time.Now.
func newHealthTracker(clock func() time.Time, onChange func(healthChange)) *healthTracker {
	if clock == nil {
		clock = time.Now
	}
	t := &healthTracker{clock: clock, onChange: onChange}
	m := map[string]*healthState{}
	t.carriers.Store(&m)
	return t
}

// Sync makes the healthTracker follow a configuration: carriers it did not know
// start up, known ones keep their state (a reload does not bring a dead
// carrier back), carriers no longer named are forgotten. A carrier whose
// policy is turned off is up from then on.
func (t *healthTracker) Sync(policies map[string]healthPolicy) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.carriers.Load()
	next := make(map[string]*healthState, len(policies))
	now := t.clock()
	for name, pol := range policies {
		c := old[name]
		if c == nil {
			c = &healthState{since: now}
			c.up.Store(true)
		}
		c.pol = pol
		if !pol.Enabled && !c.up.Load() {
			t.set(name, c, true, "probing turned off")
		}
		if c.pol.DownAfter < 1 {
			c.pol.DownAfter = 1
		}
		if c.pol.UpAfter < 1 {
			c.pol.UpAfter = 1
		}
		next[name] = c
	}
	t.carriers.Store(&next)
}

// Up reports whether calls may be sent to the carrier named name. A
// carrier the healthTracker does not know is up.
func (t *healthTracker) Up(name string) bool {
	c := (*t.carriers.Load())[name]
	return c == nil || c.up.Load()
}

// health returns what the healthTracker believes of the carrier named name; ok is
// false for a carrier it does not know.
func (t *healthTracker) health(name string) (s Health, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := (*t.carriers.Load())[name]
	if c == nil {
		return Health{Up: true}, false
	}
	return Health{Up: c.up.Load(), Since: c.since, Reason: c.reason}, true
}

// Probed records the result of one probe: ok for any answer other than a
// 5xx or 408, false for those and for no answer in time. detail says what
// happened, for the reason of a change. again asks the caller to probe once
// more right away (after the probe's timeout): a confirmation that failed
// calls asked for is under way and not decided yet.
//
// DownAfter failed probes in a row mark the carrier down, unless a call to
// it was answered within Interval × DownAfter: a carrier that answers calls
// but not OPTIONS (many trunks drop them) would otherwise be taken out of
// service by its probes; its probe failures are then ignored, with one
// Notice, until a probe is answered.
func (t *healthTracker) Probed(name string, ok bool, detail string) (again bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, now := t.judged(name)
	if c == nil {
		return false
	}
	if ok {
		c.probeFails = 0
		c.probesIgnored = false
		if c.confirming {
			// The carrier answers: the calls' failures were theirs (a
			// peer dialling numbers the carrier refuses), not the
			// carrier's. Suspected only, so back at once.
			t.set(name, c, true, "probe: answered ("+detail+") while "+plural(c.callFails, "failed call")+" in a row were confirmed: the failures were the calls'")
			return false
		}
		if c.up.Load() {
			return false
		}
		c.probeOKs++
		if c.probeOKs >= c.pol.UpAfter {
			c.callFails = 0
			t.set(name, c, true, "probe: "+plural(c.probeOKs, "good answer")+" in a row ("+detail+")")
		}
		return false
	}
	c.probeOKs = 0
	if c.probesIgnored || (!c.up.Load() && !c.confirming) {
		return false
	}
	c.probeFails++
	if c.probeFails < c.pol.DownAfter {
		return c.confirming
	}
	if !c.confirming && !c.lastGoodCall.IsZero() && now.Sub(c.lastGoodCall) <= time.Duration(c.pol.DownAfter)*c.pol.Interval {
		c.probesIgnored = true
		c.probeFails = 0
		if t.onChange != nil {
			t.onChange(healthChange{Carrier: name, Up: true, Notice: true, Reason: "probe: " + plural(c.pol.DownAfter, "failure") +
				" in a row (last: " + detail + ") while its calls are answered: it does not answer OPTIONS, so its probe failures are ignored until a probe is answered (probe: {interval: 0s} stops probing it)"})
		}
		return false
	}
	if c.confirming {
		// Down since the calls said so (Since stays): now confirmed.
		c.confirming = false
		c.reason = "calls: " + plural(c.callFails, "failure") + " in a row (last: " + c.lastCall + "), confirmed by " + plural(c.probeFails, "failed probe") + " (last: " + detail + ")"
		c.probeOKs, c.probeFails = 0, 0
		if t.onChange != nil {
			t.onChange(healthChange{Carrier: name, Up: false, Confirmed: true, Reason: c.reason})
		}
		return false
	}
	t.set(name, c, false, "probe: "+plural(c.probeFails, "failure")+" in a row (last: "+detail+")")
	return false
}

// Called records the outcome of one forwarded call (passive detection):
// ok when the carrier answered it usefully (a provisional answer above
// 100, or a final answer other than a 5xx or 408), false for a setup
// timeout, a transport failure, or a 5xx or 408 that was not back-pressure
// (a 503 with Retry-After is a pause, not a failure).
//
// When DownAfter calls in a row have failed, the carrier is down at once
// (suspected: no call waits for it any more) and Called returns probe
// true: the caller sends DownAfter probes at once, together, and they
// decide (Probed): DownAfter failures confirm it down, one answer brings
// it back at once (as does an answered call). Calls alone never keep a
// carrier down: a peer chooses what it dials and what its INVITEs look
// like, so it could make a live carrier fail a few calls in a row
// (numbers it refuses with a 5xx, INVITEs too large for its UDP path);
// that costs the others one probe round trip of the carrier, at most once
// per Interval. Only probed carriers are judged: the probe is also what
// brings them back.
func (t *healthTracker) Called(name string, ok bool, detail string) (probe bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, now := t.judged(name)
	if c == nil {
		return false
	}
	if ok {
		if c.confirming {
			// A call answered (one already under way) while its probes
			// confirm: it is alive.
			t.set(name, c, true, "calls: answered while "+plural(c.callFails, "failed call")+" in a row were confirmed: the failures were the calls'")
		}
		c.callFails = 0
		c.lastGoodCall = now
		return false
	}
	c.callFails++
	c.lastCall = detail
	if !c.up.Load() || c.confirming || c.probesIgnored || c.callFails < c.pol.DownAfter {
		return false
	}
	if !c.lastConfirm.IsZero() && now.Sub(c.lastConfirm) < c.pol.Interval {
		return false
	}
	// Down at once: no call waits for a carrier whose calls fail while
	// its probes confirm (at once, together). A live carrier's probes
	// answer within a round trip and bring it back.
	c.confirming = true
	c.lastConfirm = now
	c.up.Store(false)
	c.since = now
	c.reason = "calls: " + plural(c.callFails, "failure") + " in a row (last: " + detail + "), confirming with " + plural(c.pol.DownAfter, "probe")
	c.probeOKs, c.probeFails = 0, 0
	if t.onChange != nil {
		t.onChange(healthChange{Carrier: name, Up: false, Suspect: true, Reason: c.reason})
	}
	return true
}

// Confirming reports whether failed calls took the carrier named name
// down and its probes have not decided yet.
func (t *healthTracker) Confirming(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, _ := t.judged(name)
	return c != nil && c.confirming
}

// judged returns the carrier named name when its results are judged
// (known, probing on), or nil, and the time; t.mu is held.
func (t *healthTracker) judged(name string) (*healthState, time.Time) {
	c := (*t.carriers.Load())[name]
	if c == nil || !c.pol.Enabled {
		return nil, time.Time{}
	}
	return c, t.clock()
}

// set changes c's state; t.mu is held.
func (t *healthTracker) set(name string, c *healthState, up bool, reason string) {
	c.up.Store(up)
	c.since = t.clock()
	c.reason = reason
	c.probeOKs, c.probeFails = 0, 0
	c.confirming = false
	if up {
		c.callFails = 0
	}
	if t.onChange != nil {
		t.onChange(healthChange{Carrier: name, Up: up, Reason: reason})
	}
}

func plural(n int, what string) string {
	s := strconv.Itoa(n) + " " + what
	if n != 1 {
		s += "s"
	}
	return s
}
