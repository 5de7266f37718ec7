package health

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Policy is how one carrier is judged. A carrier whose Policy is not
// Enabled is always up and its results are ignored.
type Policy struct {
	// Enabled turns judging on (the carrier is probed).
	Enabled bool
	// DownAfter failed probes in a row, or failed calls in a row, mark the
	// carrier down (>= 1).
	DownAfter int
	// UpAfter good probes in a row mark a down carrier up (>= 1).
	UpAfter int
}

// Change is one carrier going down or coming up.
type Change struct {
	// Carrier is the carrier's configured name.
	Carrier string
	// Up is the new state.
	Up bool
	// Reason says what decided it ("probe: no answer in 1s", "calls: 3
	// setup timeouts in a row", …).
	Reason string
}

// State is what the Tracker believes of one carrier.
type State struct {
	// Up reports whether calls may be sent to the carrier.
	Up bool
	// Since is when the carrier entered this state (the Tracker's clock).
	Since time.Time
	// Reason says why it is in this state (empty for a carrier that has
	// been up since it was configured).
	Reason string
}

type carrier struct {
	up atomic.Bool // read without the Tracker's mutex

	// Guarded by Tracker.mu.
	pol        Policy
	probeFails int
	probeOKs   int
	callFails  int
	// confirming: calls failed DownAfter times in a row and a probe was
	// asked for; its failure marks the carrier down.
	confirming bool
	lastCall   string // the last failed call, for the reason
	since      time.Time
	reason     string
}

// Tracker holds the health of the configured carriers.
type Tracker struct {
	clock    func() time.Time
	onChange func(Change)

	mu       sync.Mutex
	carriers atomic.Pointer[map[string]*carrier] // replaced whole by Sync
}

// NewTracker returns a Tracker that knows no carrier yet. onChange (may be
// nil) is called, with the Tracker's mutex held, for every change of state;
// it must be quick and must not call the Tracker. clock nil means time.Now.
func NewTracker(clock func() time.Time, onChange func(Change)) *Tracker {
	if clock == nil {
		clock = time.Now
	}
	t := &Tracker{clock: clock, onChange: onChange}
	m := map[string]*carrier{}
	t.carriers.Store(&m)
	return t
}

// Sync makes the Tracker follow a configuration: carriers it did not know
// start up, known ones keep their state (a reload does not bring a dead
// carrier back), carriers no longer named are forgotten. A carrier whose
// policy is turned off is up from then on.
func (t *Tracker) Sync(policies map[string]Policy) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.carriers.Load()
	next := make(map[string]*carrier, len(policies))
	now := t.clock()
	for name, pol := range policies {
		c := old[name]
		if c == nil {
			c = &carrier{since: now}
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
// carrier the Tracker does not know is up.
func (t *Tracker) Up(name string) bool {
	c := (*t.carriers.Load())[name]
	return c == nil || c.up.Load()
}

// State returns what the Tracker believes of the carrier named name; ok is
// false for a carrier it does not know.
func (t *Tracker) State(name string) (s State, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := (*t.carriers.Load())[name]
	if c == nil {
		return State{Up: true}, false
	}
	return State{Up: c.up.Load(), Since: c.since, Reason: c.reason}, true
}

// Probed records the result of one probe: ok for any answer other than a
// 5xx or 408, false for those and for no answer in time. detail says what
// happened, for the reason of a change. While a call failure streak waits
// for confirmation (see Called), one failed probe marks the carrier down
// and one good probe clears the streak.
func (t *Tracker) Probed(name string, ok bool, detail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := (*t.carriers.Load())[name]
	if c == nil || !c.pol.Enabled {
		return
	}
	confirming := c.confirming
	c.confirming = false
	if ok {
		c.probeFails = 0
		if confirming {
			c.callFails = 0 // the carrier answers: the calls' failures were theirs
		}
		if c.up.Load() {
			return
		}
		c.probeOKs++
		if c.probeOKs >= c.pol.UpAfter {
			c.callFails = 0
			t.set(name, c, true, "probe: "+plural(c.probeOKs, "good answer")+" in a row ("+detail+")")
		}
		return
	}
	c.probeOKs = 0
	c.probeFails++
	switch {
	case !c.up.Load():
	case confirming:
		t.set(name, c, false, "calls: "+plural(c.callFails, "failure")+" in a row (last: "+c.lastCall+"), confirmed by a probe ("+detail+")")
	case c.probeFails >= c.pol.DownAfter:
		t.set(name, c, false, "probe: "+plural(c.probeFails, "failure")+" in a row (last: "+detail+")")
	}
}

// Called records the outcome of one forwarded call (passive detection):
// ok when the carrier answered it usefully (a provisional answer above
// 100, or a final answer other than a 5xx or 408), false for a setup
// timeout, a transport failure, or a 5xx or 408 that was not back-pressure
// (a 503 with Retry-After is a pause, not a failure).
//
// Calls alone never mark a carrier down: a peer chooses what it dials and
// what its INVITEs look like, so it could make a live carrier fail a few
// calls in a row (numbers it refuses with a 5xx, INVITEs too large for its
// UDP path) and take it away from every other peer. When DownAfter calls
// in a row have failed, Called returns probe true once: the caller probes
// the carrier at once, and that probe decides (Probed). Only probed
// carriers are judged: the probe is also what brings them back.
func (t *Tracker) Called(name string, ok bool, detail string) (probe bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := (*t.carriers.Load())[name]
	if c == nil || !c.pol.Enabled {
		return false
	}
	if ok {
		c.callFails = 0
		return false
	}
	c.callFails++
	c.lastCall = detail
	if c.up.Load() && !c.confirming && c.callFails >= c.pol.DownAfter {
		c.confirming = true
		return true
	}
	return false
}

// set changes c's state; t.mu is held.
func (t *Tracker) set(name string, c *carrier, up bool, reason string) {
	c.up.Store(up)
	c.since = t.clock()
	c.reason = reason
	c.probeOKs, c.probeFails = 0, 0
	c.confirming = false
	if up {
		c.callFails = 0
	}
	if t.onChange != nil {
		t.onChange(Change{Carrier: name, Up: up, Reason: reason})
	}
}

func plural(n int, what string) string {
	s := strconv.Itoa(n) + " " + what
	if n != 1 {
		s += "s"
	}
	return s
}
