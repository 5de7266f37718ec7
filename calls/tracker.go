package calls

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of TrackerOptions.
const (
	// DefaultTTL is how long a place lives unless refreshed: the bound on
	// how long the calls of a node that died keep their places.
	DefaultTTL = 60 * time.Second
	// DefaultMaxDuration caps how long a call holds its places.
	DefaultMaxDuration = 4 * time.Hour
	// refreshBatch is the most members one refresh script call names.
	refreshBatch = 500
	// endTimeout bounds the store call that frees a call's places; it runs
	// even when the call's own context is done.
	endTimeout = time.Second
	// registryEvery is how often the registry writes queued since the
	// last round are sent: a call shorter than that (put and removed in
	// one round) costs the registry nothing.
	registryEvery = 200 * time.Millisecond
	// refreshChunk bounds the calls a refresh round walks under one hold
	// of the Tracker's lock: every call's setup and end takes that lock,
	// and a walk of 200,000 calls up held it 30 ms (and the listing of
	// them 200-300 ms more) every TTL/3.
	refreshChunk = 1024
)

// refreshChunkDone, when set (tests), is called after each chunk of a
// refresh round, with the Tracker's lock let go; listChunkDone likewise
// after each chunk of List.
var refreshChunkDone, listChunkDone func()

// maxPending bounds the registry writes queued between two flushes; past
// it new entries wait for the next refresh, which flushes as it goes
// (a variable: tests lower it).
var maxPending = 100000

// Reasons a Tracker ends a call (Ended.Reason).
const (
	// ReasonBye: a BYE that passed the dialog check ended it (EndDialog,
	// or Answer carrying out a BYE that came first).
	ReasonBye = "bye"
	// ReasonMaxDuration: the call reached MaxDuration.
	ReasonMaxDuration = "max_call_duration"
	// ReasonShutdown: the node stopped (Shutdown).
	ReasonShutdown = "shutdown"
)

// Ended is a call the Tracker ended, as OnEnd is told.
type Ended struct {
	// Member is the call's member; Data what Track attached to it.
	Member string
	Data   any
	// Reason is ReasonBye, ReasonMaxDuration, ReasonShutdown, or the
	// reason given to EndAs.
	Reason string
	// By is what EndDialog or EndAs was told ended it ("" for the
	// Tracker's own ends).
	By string
	// At is when it ended (TrackerOptions.Now).
	At time.Time
}

// Found is a live call Find found.
type Found struct {
	Member string
	Data   any
	Info   Live
}

// TrackerOptions configures a Tracker.
type TrackerOptions struct {
	// TTL is how long a place lives unless refreshed (default DefaultTTL);
	// the refresher runs every TTL/3.
	TTL time.Duration
	// MaxDuration caps a call: its places are freed that long after it
	// took the first one (default DefaultMaxDuration).
	MaxDuration time.Duration
	// Now is the clock of MaxDuration (default time.Now).
	Now func() time.Time
	// OnError is told of every failed Free and Refresh (metrics); nil
	// ignores them: the places then expire with the TTL.
	OnError func(op string, err error)
	Logger  *slog.Logger
	// Registry lists the calls the Tracker holds for the pool (the ones
	// Track gave a Live with an ID); nil: not listed. Writes are batched
	// every registryEvery and never wait on the caller's path; entries
	// are put again at every refresh and live TTL.
	Registry Registry
}

// live is one call this node set up that holds places.
type live struct {
	// round is the last refresh round that looked at the call (a member
	// queued twice in order is looked at once a round); kept, the last
	// compaction of order that kept it.
	round, kept uint64
	// listed is the last List that listed the call.
	listed uint64
	keys   []string
	start  time.Time
	dialog string // "" until the call is forwarded (Bind)
	// callee is the callee's tag of the answer (Answer): a BYE ends the
	// call only when it names this tag, so a BYE with a made-up tag (which
	// the carrier refuses, 481, the call going on) frees nothing.
	callee string
	// pendingEnd is the callee's tag of a BYE that came before the answer
	// was recorded (a carrier's BYE racing its own 2xx): the matching
	// Answer ends the call; pendingBy is who sent it.
	pendingEnd, pendingBy string
	// info is the call as the registry lists it (ID "": not listed).
	info Live
	// at is the call's place in the Tracker's byCallID[info.CallID]
	// (listed calls only), so its end takes it out without a walk of the
	// others that share its Call-ID.
	at int
	// dat is the call's place in the Tracker's dialogs[dialog] (bound
	// calls only), so its end takes it out without a walk of the others
	// bound to its dialog.
	dat int
	// data is the owner's, handed back in Ended and Found.
	data any
}

// Tracker holds the places of the calls this node set up: it takes them
// (Occupy), frees them at the call's end (End, EndDialog, Release), and
// keeps them alive while the call lives (Run). It keeps state only for the
// calls it placed, each removed at the call's end or at MaxDuration.
//
// A Tracker is safe for concurrent use.
type Tracker struct {
	store Store
	o     TrackerOptions

	mu    sync.Mutex
	calls map[string]*live // member -> call
	// dialogs: dialog id -> the members bound to it (Bind). Unordered, as
	// byCallID: a member leaves by a swap with the last (live.dat), as a
	// peer may set up any number of calls in one dialog id (same Call-ID,
	// From tag and leg, another Via branch each) and each of their ends
	// must not walk the others.
	dialogs map[string][]string
	// byCallID: Live.CallID -> the members listed with it (Find), so an
	// operator's end of a call does not walk every call under mu. Unordered:
	// a member leaves by a swap with the last (live.at), as a peer may set
	// up any number of calls that share a Call-ID (or the 256 bytes of one
	// that the listing keeps), and each of their ends must not walk the
	// others.
	byCallID map[string][]string
	// order holds the members of calls in the order they were first
	// tracked, for the refresh rounds, which walk it a chunk at a time;
	// forgotten members stay until Refresh compacts it.
	order       []string
	round       uint64 // the refresh rounds begun
	compactions uint64 // the compactions of order
	listings    uint64 // the Lists begun
	listMu      sync.Mutex

	kick chan struct{} // Kick asks Run for a refresh round now

	onEnd func(Ended) // SetOnEnd; read under mu

	regMu   sync.Mutex
	pending map[string]*Live // registry writes to send: id -> entry, nil = remove
	flushMu sync.Mutex       // one flush at a time, so writes keep their order
}

// NewTracker returns a Tracker on store.
func NewTracker(store Store, o TrackerOptions) *Tracker {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxDuration <= 0 {
		o.MaxDuration = DefaultMaxDuration
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Tracker{store: store, o: o, calls: make(map[string]*live), dialogs: make(map[string][]string),
		byCallID: make(map[string][]string), kick: make(chan struct{}, 1), pending: make(map[string]*Live)}
}

// SetOnEnd sets f to be told of every call the Tracker ends by itself or
// on a BYE (EndDialog, Answer, MaxDuration, Shutdown) and through EndAs,
// after the call is forgotten and outside the Tracker's lock. End, the
// owner ending its own call, does not tell it.
func (t *Tracker) SetOnEnd(f func(Ended)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onEnd = f
}

// Track remembers member as a live call of this node, whether or not it
// holds places, with the owner's data; info (with an ID) lists it in the
// Registry. Tracking it again updates info and data (a call routed to its
// next carrier). It is forgotten like any call: End, EndDialog, EndAs,
// MaxDuration, Shutdown. info's strings are kept for the call's life as
// given: pass strings of their own, not parts of a parsed message (the
// node passes its call's copied Call-ID, call.callID).
func (t *Tracker) Track(member string, info Live, data any) {
	t.mu.Lock()
	c := t.calls[member]
	if c == nil {
		c = &live{start: t.o.Now()}
		t.calls[member] = c
		t.order = append(t.order, member)
	}
	if info.ID != "" {
		if c.info.ID == "" || c.info.CallID != info.CallID {
			if c.info.ID != "" {
				t.unindex(c)
			}
			c.at = len(t.byCallID[info.CallID])
			t.byCallID[info.CallID] = append(t.byCallID[info.CallID], member)
		}
		c.info = info
		// Under t.mu: an end that follows queues its removal after this.
		t.regPut(info)
	}
	c.data = data
	t.mu.Unlock()
}

// Find returns the live calls whose Live names callID.
func (t *Tracker) Find(callID string) []Found {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Found
	for _, m := range t.byCallID[callID] {
		if c := t.calls[m]; c != nil && c.info.ID != "" && c.info.CallID == callID {
			out = append(out, Found{Member: m, Data: c.data, Info: c.info})
		}
	}
	return out
}

// unindex takes c, a listed call, out of byCallID (t.mu held): the last
// member of its Call-ID takes its place.
func (t *Tracker) unindex(c *live) {
	id := c.info.CallID
	ms, moved := swapOut(t.byCallID[id], c.at)
	if mc := t.calls[moved]; moved != "" && mc != nil {
		mc.at = c.at
	}
	if len(ms) == 0 {
		delete(t.byCallID, id)
	} else {
		t.byCallID[id] = ms
	}
}

// undial takes c, a bound call, out of dialogs (t.mu held): the last
// member of its dialog takes its place.
func (t *Tracker) undial(c *live) {
	ms, moved := swapOut(t.dialogs[c.dialog], c.dat)
	if mc := t.calls[moved]; moved != "" && mc != nil {
		mc.dat = c.dat
	}
	if len(ms) == 0 {
		delete(t.dialogs, c.dialog)
	} else {
		t.dialogs[c.dialog] = ms
	}
}

// swapOut removes ms[at] by moving the last member into its place, and
// returns what is left and the member moved ("": none). The slice is
// copied smaller once a quarter of it is used, so a burst of calls that
// share a key does not keep its size. An at out of range (cannot happen)
// changes nothing.
func swapOut(ms []string, at int) (rest []string, moved string) {
	if at < 0 || at >= len(ms) {
		return ms, ""
	}
	last := len(ms) - 1
	if at != last {
		ms[at] = ms[last]
		moved = ms[at]
	}
	ms[last] = ""
	ms = ms[:last]
	if len(ms) > 0 && cap(ms) > 16 && len(ms) < cap(ms)/4 {
		ms = slices.Clone(ms)
	}
	return ms, moved
}

// DialogCalls returns how many live calls are bound to dialog (Bind),
// without copying them.
func (t *Tracker) DialogCalls(dialog string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dialogs[dialog])
}

// FindDialog returns the live calls bound to dialog (Bind), in no
// particular order.
func (t *Tracker) FindDialog(dialog string) []Found {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := t.dialogs[dialog]
	if len(ms) == 0 {
		return nil
	}
	// Sized once: a peer may bind many calls to one dialog id, and this
	// runs under mu for each in-dialog request.
	out := make([]Found, 0, len(ms))
	for _, m := range ms {
		if c := t.calls[m]; c != nil {
			out = append(out, Found{Member: m, Data: c.data, Info: c.info})
		}
	}
	return out
}

// List returns the calls this node lists in the Registry (its own view,
// for when the Registry cannot be read). It walks the calls tracked
// before it began refreshChunk at a time, letting go of the Tracker's
// lock between chunks (a copy of 200,000 calls under it held every call's
// setup and end ~70 ms): a call set up or ended meanwhile may be listed
// or not; each call is listed once.
func (t *Tracker) List() []Live {
	// One listing at a time: each marks the calls it listed.
	t.listMu.Lock()
	defer t.listMu.Unlock()
	t.mu.Lock()
	// order only grows in place (a compaction makes a new slice), so its
	// first last members stay as they are without the lock.
	last := len(t.order)
	order := t.order[:last:last]
	out := make([]Live, 0, len(t.calls))
	t.listings++
	gen := t.listings
	t.mu.Unlock()
	for i := 0; i < last; {
		t.mu.Lock()
		for end := min(i+refreshChunk, last); i < end; i++ {
			// A member queued twice in order (tracked again after it was
			// forgotten) is listed at its first.
			c := t.calls[order[i]]
			if c == nil || c.info.ID == "" || c.listed == gen {
				continue
			}
			c.listed = gen
			out = append(out, c.info)
		}
		t.mu.Unlock()
		if listChunkDone != nil {
			listChunkDone()
		}
	}
	return out
}

// EndAs ends member (frees its places, forgets it, removes its listing)
// and tells OnEnd with reason and by. It reports false for a call the
// Tracker does not hold.
func (t *Tracker) EndAs(ctx context.Context, member, reason, by string) bool {
	t.mu.Lock()
	c := t.forget(member)
	f := t.onEnd
	t.mu.Unlock()
	if c == nil {
		return false
	}
	t.ended(ctx, member, c, f, reason, by)
	return true
}

// ended frees the places of c, a call just forgotten, and tells f.
func (t *Tracker) ended(ctx context.Context, member string, c *live, f func(Ended), reason, by string) {
	t.free(ctx, member, c.keys)
	if f != nil {
		f(Ended{Member: member, Data: c.data, Reason: reason, By: by, At: t.o.Now()})
	}
}

// Shutdown ends every call the Tracker holds (the node stops supervising
// them): OnEnd is told with ReasonShutdown and the listings are removed,
// within ctx. Their places are not freed: the calls may go on between
// their ends, and the places expire within the TTL when no node refreshes
// them.
func (t *Tracker) Shutdown(ctx context.Context) {
	t.mu.Lock()
	all := make(map[string]*live, len(t.calls))
	for m := range t.calls {
		all[m] = t.forget(m)
	}
	f := t.onEnd
	t.mu.Unlock()
	now := t.o.Now()
	for m, c := range all {
		if c.info.ID != "" {
			t.regDel(c.info.ID)
		}
		if f != nil {
			f(Ended{Member: m, Data: c.data, Reason: ReasonShutdown, At: now})
		}
	}
	t.flushRegistry(ctx)
}

// TTL is the time a dead node's calls keep their places at most.
func (t *Tracker) TTL() time.Duration { return t.o.TTL }

// Occupy takes member's places in every Place, all or none (Store.Occupy),
// and remembers them so End frees them. Places a call already holds may be
// added to (the carrier's, once the call is routed). A duplicate (the call
// is live already) adds nothing here.
func (t *Tracker) Occupy(ctx context.Context, member string, places []Place) (Decision, error) {
	d, err := t.store.Occupy(ctx, member, t.o.TTL, places)
	if err != nil || !d.Admit || d.Duplicate {
		return d, err
	}
	t.mu.Lock()
	c := t.calls[member]
	if c == nil {
		c = &live{start: t.o.Now()}
		t.calls[member] = c
		t.order = append(t.order, member)
	}
	for _, p := range places {
		if !slices.Contains(c.keys, p.Key) {
			c.keys = append(c.keys, p.Key)
		}
	}
	t.mu.Unlock()
	return d, nil
}

// Release frees some of member's places (a carrier the call leaves for the
// next one) and keeps the others.
func (t *Tracker) Release(ctx context.Context, member string, keys []string) {
	t.mu.Lock()
	c := t.calls[member]
	var free []string
	if c != nil {
		for _, k := range keys {
			if i := slices.Index(c.keys, k); i >= 0 {
				c.keys = slices.Delete(c.keys, i, i+1)
				free = append(free, k)
			}
		}
	}
	t.mu.Unlock()
	t.free(ctx, member, free)
}

// Bind binds a live call to its dialog (Call-ID and the caller's From
// tag), so a BYE that passed the dialog token check can end it. The proxy
// binds a call when it forwards it: the dialog is known then, and a BYE
// that races the call's 2xx still finds it. Binding twice keeps the first.
func (t *Tracker) Bind(member, dialog string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.calls[member]
	if c == nil || c.dialog != "" {
		return
	}
	c.dialog = dialog
	c.dat = len(t.dialogs[dialog])
	t.dialogs[dialog] = append(t.dialogs[dialog], member)
}

// End frees every place of member and forgets it. Ending a call that holds
// nothing (never placed, or ended already) does nothing.
func (t *Tracker) End(ctx context.Context, member string) {
	t.mu.Lock()
	c := t.forget(member)
	t.mu.Unlock()
	if c != nil {
		t.free(ctx, member, c.keys)
	}
}

// Answer records the callee's tag of member's answer (its 2xx): from now
// on a BYE ends the call only when it names that tag. When a BYE with that
// tag came first, the call ends now and Answer reports true.
func (t *Tracker) Answer(ctx context.Context, member, calleeTag string) bool {
	t.mu.Lock()
	c := t.calls[member]
	if c == nil {
		t.mu.Unlock()
		return false
	}
	c.callee = strings.Clone(calleeTag)
	if c.pendingEnd == "" || c.pendingEnd != calleeTag {
		if c.info.ID != "" {
			at := t.o.Now().UTC().Truncate(time.Millisecond)
			c.info.AnsweredAt = &at
			t.regPut(c.info)
		}
		t.mu.Unlock()
		return false
	}
	by := c.pendingBy
	c = t.forget(member)
	f := t.onEnd
	t.mu.Unlock()
	t.ended(ctx, member, c, f, ReasonBye, by)
	return true
}

// EndDialog ends the live call of dialog whose answer named calleeTag (a
// verified BYE: its Call-ID, caller's tag and peer leg make dialog, its
// other tag is the callee's) and reports whether there was one; by says
// who sent the BYE (OnEnd is told). Of several such calls it ends the
// oldest (first tracked). A BYE for a call this node does not hold, or
// naming another callee tag, frees nothing; one that comes before the
// call's answer was recorded is kept as a pending end that the matching
// Answer carries out (on each call of dialog not answered yet, older than
// the call it ended, if any).
func (t *Tracker) EndDialog(ctx context.Context, dialog, calleeTag, by string) bool {
	if calleeTag == "" {
		return false
	}
	t.mu.Lock()
	// dialogs keeps no order: the oldest match is looked for in all.
	var member string
	var match *live
	for _, m := range t.dialogs[dialog] {
		if c := t.calls[m]; c != nil && c.callee == calleeTag && (match == nil || c.start.Before(match.start)) {
			member, match = m, c
		}
	}
	for _, m := range t.dialogs[dialog] {
		c := t.calls[m]
		if c != nil && c.callee == "" && c.pendingEnd == "" && (match == nil || c.start.Before(match.start)) {
			// A copy: it may stay for the call's life (an answer that
			// names another tag does not clear it), and a part of a BYE
			// parsed by wire.Parser would keep the whole BYE (h74).
			c.pendingEnd, c.pendingBy = strings.Clone(calleeTag), by
		}
	}
	if member == "" {
		t.mu.Unlock()
		return false
	}
	c := t.forget(member)
	f := t.onEnd
	t.mu.Unlock()
	if c != nil {
		t.ended(ctx, member, c, f, ReasonBye, by)
	}
	return true
}

// forget removes member's state and its listing; t.mu must be held.
func (t *Tracker) forget(member string) *live {
	c := t.calls[member]
	if c == nil {
		return nil
	}
	delete(t.calls, member)
	if c.info.ID != "" {
		t.regDel(c.info.ID)
		t.unindex(c)
	}
	if c.dialog != "" {
		t.undial(c)
	}
	return c
}

func (t *Tracker) free(ctx context.Context, member string, keys []string) {
	if len(keys) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if _, err := t.store.Free(fctx, member, keys); err != nil {
		t.o.Logger.Debug("freeing call places failed; they expire with the ttl", "member", member, "error", err)
		if t.o.OnError != nil {
			t.o.OnError("free", err)
		}
	}
}

// Live returns the number of calls this node holds places for.
func (t *Tracker) Live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls)
}

// Run refreshes the places and listings of the live calls every TTL/3,
// and at once after Kick, until ctx is done, ends the calls older than
// MaxDuration, and sends the Registry's writes every registryEvery.
func (t *Tracker) Run(ctx context.Context) {
	if t.o.Registry != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			t.runRegistry(ctx)
		}()
	}
	tick := time.NewTicker(t.o.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.Refresh(ctx)
		case <-t.kick:
			t.Refresh(ctx)
			tick.Reset(t.o.TTL / 3)
		}
	}
}

// Kick asks Run for a refresh round now, without waiting for it: the node
// calls it when the shared store is back in use, so the places its live
// calls took in the fallback (or the store lost) count in the pool again
// within one round trip instead of one refresh period. It never blocks;
// kicks while one is pending are one.
func (t *Tracker) Kick() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Refresh runs one refresh round: calls past MaxDuration are ended, the
// places of the others extended by TTL, one script call per place (and
// per refreshBatch members). A place missing from the store is added
// back (Store.Refresh): the call lives, so the limit must count it. A
// call that ended while its place was being refreshed is freed again
// there, so a refresh racing a call's end never leaves its place behind.
//
// The round walks the calls refreshChunk at a time, letting go of the
// Tracker's lock between chunks, so calls set up and ended meanwhile wait
// for one chunk at most; a call tracked during the round may be looked
// at in it (through an older entry of its member) or in the next (it has
// just taken its places and queued its listing). The listings it queues
// for the Registry are flushed as the queue fills, so every call is
// listed again each round however many there are. Run is its only
// caller: two rounds at once would be safe but could each miss a few
// calls.
func (t *Tracker) Refresh(ctx context.Context) {
	now := t.o.Now()
	byKey := make(map[string][]string)
	var expired []string
	t.mu.Lock()
	t.round++
	round := t.round
	t.compactOrder()
	// The round walks the calls tracked before it began: one set up
	// meanwhile has just taken its places and queued its listing. Were the
	// end the live length of order, a call set up between every two chunks
	// would keep the round from ending, and its places from being
	// refreshed (they are, after the walk).
	last := len(t.order)
	t.mu.Unlock()
	for i := 0; ; {
		flushed, progressed := false, 0
		if t.o.Registry != nil && t.pendingLen() >= maxPending/2 {
			t.flushRegistry(ctx)
			flushed = true
		}
		t.mu.Lock()
		if i >= last {
			t.mu.Unlock()
			break
		}
		for end := min(i+refreshChunk, last); i < end; i++ {
			c := t.calls[t.order[i]]
			if c == nil || c.round == round {
				continue
			}
			// A call past MaxDuration is ended after the walk, not listed
			// again first: its removal may find the queue full and be
			// dropped, and a listing just put would then stay a whole TTL.
			if now.Sub(c.start) >= t.o.MaxDuration {
				c.round = round
				expired = append(expired, t.order[i])
				continue
			}
			// A full queue ends the chunk here: flushed, the round goes
			// on from this call. Only when the queue was just flushed and
			// is full again before this round queued anything (calls set
			// up meanwhile filled it) does this listing wait for the next
			// round, so the round always moves on.
			if !t.regRelist(c) {
				if !flushed || progressed > 0 {
					break
				}
			} else {
				progressed++
			}
			c.round = round
			for _, k := range c.keys {
				byKey[k] = append(byKey[k], t.order[i])
			}
		}
		t.mu.Unlock()
		if refreshChunkDone != nil {
			refreshChunkDone()
		}
	}
	for _, m := range expired {
		t.o.Logger.Debug("call reached max_call_duration; places freed", "member", m)
		t.EndAs(ctx, m, ReasonMaxDuration, "")
	}
	for k, ms := range byKey {
		for len(ms) > 0 {
			n := min(len(ms), refreshBatch)
			rctx, cancel := context.WithTimeout(ctx, t.o.TTL/3)
			restored, err := t.store.Refresh(rctx, k, t.o.TTL, ms[:n])
			cancel()
			if err != nil {
				t.o.Logger.Debug("refreshing call places failed", "key", k, "error", err)
				if t.o.OnError != nil {
					t.o.OnError("refresh", err)
				}
			}
			if restored > 0 {
				t.o.Logger.Info("live calls' places were missing from the store and are counted again", "key", k, "calls", restored)
			}
			for _, m := range t.gone(k, ms[:n]) {
				t.free(ctx, m, []string{k})
			}
			ms = ms[n:]
		}
	}
}

// gone returns the members of ms that no longer hold key k (their call
// ended, or left the carrier of k, since the refresh round began).
func (t *Tracker) gone(k string, ms []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, m := range ms {
		if c := t.calls[m]; c == nil || !slices.Contains(c.keys, k) {
			out = append(out, m)
		}
	}
	return out
}

// regPut queues a listing of info for the Registry; t.mu must be held
// (so a removal queued by the call's end comes after it).
func (t *Tracker) regPut(info Live) {
	if t.o.Registry == nil {
		return
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if _, queued := t.pending[info.ID]; !queued && len(t.pending) >= maxPending {
		return // the next refresh lists it
	}
	t.pending[info.ID] = &info
}

// regDel queues the removal of listing id.
func (t *Tracker) regDel(id string) {
	if t.o.Registry == nil {
		return
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if _, queued := t.pending[id]; !queued && len(t.pending) >= maxPending {
		return // the entry expires with the TTL
	}
	t.pending[id] = nil
}

// regRelist queues c's listing, unless a newer write of it is queued
// already; false when the queue is full (t.mu held).
func (t *Tracker) regRelist(c *live) bool {
	if t.o.Registry == nil || c.info.ID == "" {
		return true
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if _, queued := t.pending[c.info.ID]; queued {
		return true
	}
	if len(t.pending) >= maxPending {
		return false
	}
	l := c.info
	t.pending[l.ID] = &l
	return true
}

// pendingLen is the number of registry writes queued.
func (t *Tracker) pendingLen() int {
	t.regMu.Lock()
	defer t.regMu.Unlock()
	return len(t.pending)
}

// compactOrder drops the forgotten members from t.order once they are
// more than the live ones (t.mu held): a copy of the live members' names,
// a few ms at 200,000 calls up, once in several rounds at most.
func (t *Tracker) compactOrder() {
	if len(t.order) <= 2*len(t.calls)+refreshChunk {
		return
	}
	t.compactions++
	keep := make([]string, 0, len(t.calls)+refreshChunk)
	for _, m := range t.order {
		// kept marks the members kept, so one queued twice (tracked again
		// after it was forgotten) is kept once.
		if c := t.calls[m]; c != nil && c.kept != t.compactions {
			c.kept = t.compactions
			keep = append(keep, m)
		}
	}
	t.order = keep
}

// runRegistry sends the queued Registry writes every registryEvery until
// ctx is done.
func (t *Tracker) runRegistry(ctx context.Context) {
	tick := time.NewTicker(registryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fctx, cancel := context.WithTimeout(ctx, t.o.TTL/3)
			t.flushRegistry(fctx)
			cancel()
		}
	}
}

// flushRegistry sends the queued Registry writes once. A failed write is
// not retried: a listing is put again at the next refresh, and a removal
// that failed leaves the entry to expire within the TTL.
func (t *Tracker) flushRegistry(ctx context.Context) {
	if t.o.Registry == nil {
		return
	}
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.regMu.Lock()
	pending := t.pending
	if len(pending) == 0 {
		t.regMu.Unlock()
		return
	}
	t.pending = make(map[string]*Live)
	t.regMu.Unlock()
	var puts []Live
	var dels []string
	for id, l := range pending {
		if l == nil {
			dels = append(dels, id)
		} else {
			puts = append(puts, *l)
		}
	}
	fail := func(op string, err error) {
		t.o.Logger.Debug("live calls registry write failed", "op", op, "error", err)
		if t.o.OnError != nil {
			t.o.OnError(op, err)
		}
	}
	if len(dels) > 0 {
		if err := t.o.Registry.Remove(ctx, dels); err != nil {
			fail("registry_remove", err)
		}
	}
	if len(puts) > 0 {
		if err := t.o.Registry.Put(ctx, t.o.TTL, puts); err != nil {
			fail("registry_put", err)
		}
	}
}
