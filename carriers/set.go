package carriers

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// Pacer is what the carriers need of pacing: the pool's Retry-After
// pauses, adaptive rates, overload evidence and slot queues of each
// carrier. *pacing.Pacer satisfies it.
type Pacer interface {
	// Pause grants no slot of carrier c, on any node, for span from now;
	// then one call tries it (half-open).
	Pause(ctx context.Context, c pacing.Carrier, span time.Duration, reason string) (pacing.Pause, error)
	// Paused reads c's pause from the store.
	Paused(ctx context.Context, c pacing.Carrier) (pacing.Pause, error)
	// ProbeDone ends the half-open probe call member of c's pause: ok ends
	// the pause, else the next call tries.
	ProbeDone(ctx context.Context, c pacing.Carrier, member string, ok bool) (pacing.Pause, error)
	// OpenPause ends the span of a pause at least minAge old (a good
	// OPTIONS probe): one call tries the carrier.
	OpenPause(ctx context.Context, c pacing.Carrier, minAge time.Duration) (pacing.Pause, error)
	// Unpause ends c's pause for the pool.
	Unpause(ctx context.Context, c pacing.Carrier) (pacing.Pause, error)
	// LocalPause is what this node knows of c's pause, without I/O.
	LocalPause(c pacing.Carrier) pacing.Pause
	// Evidence records that peer called c (overload: and got an overload
	// answer) and counts the peers of the pool that did lately.
	Evidence(ctx context.Context, c pacing.Carrier, peer string, overload bool, w pacing.EvidenceWindows) (pacing.Evidence, error)
	// Adapt returns adaptive carrier c's effective rate, first decreasing
	// it when overload (AIMD, pool-wide).
	Adapt(ctx context.Context, c pacing.Carrier, a pacing.AIMD, overload bool) (pacing.Rate, error)
	// Respace paces c at c.CPS, and gates it at gate.CPS, from now on:
	// its limit changed on this node. Lowered, this node's calls already
	// waiting take a slot again at it.
	Respace(ctx context.Context, c pacing.Carrier, gate pacing.GateKey, lowered bool) error
	// Queue reads c's slots: the calls waiting, the slots of the last
	// second and the least wait of a call reserving now (least_wait
	// routes).
	Queue(ctx context.Context, c pacing.Carrier) (pacing.QueueState, error)
}

var _ Pacer = (*pacing.Pacer)(nil)

// Options configure a Set. Config and Pacer are required.
type Options struct {
	// Config returns the configuration snapshot in force; the Set reads it
	// per decision, so a reload applies at once.
	Config func() *config.Config
	// Pacer keeps the pool's pauses, adaptive rates, overload evidence
	// and slot queues.
	Pacer Pacer
	// Service keeps the carriers taken out of service by hand, pool-wide
	// (a *RedisService on the pool's Redis); nil: in this process only.
	Service ServiceStore
	// Overrides are the pool's live limit overrides (a *limits.Overrides);
	// nil: the configured cps.
	Overrides limits.Lookup
	// Metrics receives the carrier gauges and counters; nil builds a
	// private, unexported set.
	Metrics *metrics.Metrics
	// Logger receives carriers going down and up, pauses and cuts; nil:
	// slog.Default().
	Logger *slog.Logger
	// Resolver looks carriers' host names up (SRV, A, AAAA); nil:
	// net.DefaultResolver.
	Resolver *net.Resolver
	// Clock is the health and answer-seizure clock; nil: time.Now.
	Clock func() time.Time
}

// Set is what a node knows of its carriers and decides about them: which
// to try for a route and in what order, whether one is usable now, the
// rate each is paced at and where its calls go. Build it with New; Run
// keeps it fresh. A Set is safe for concurrent use.
type Set struct {
	cfg       func() *config.Config
	pacer     Pacer
	overrides limits.Lookup
	m         *metrics.Metrics
	log       *slog.Logger
	panics    *panics.Reporter
	clock     func() time.Time

	// health is what this node believes of each carrier (probes, calls).
	health *healthTracker
	// rates are the adaptive carriers' effective rates, as last read.
	rates rateCache
	// callers remembers which peers this node reported as callers of
	// which carriers lately (evidence.go).
	callers callerReports
	// storeCalls keeps the background store calls carriers' answers start
	// (overload evidence, Retry-After pauses, AIMD cuts) to one per
	// carrier and peer at a time.
	storeCalls oneAtATime
	// resolver keeps the addresses of carriers named by host name.
	resolver *resolver
	// service keeps the pool's carriers out of service by hand; out is
	// this node's view of them.
	service ServiceStore
	out     outView
	// asr are the carriers' answer-seizure windows on this node.
	asr asrTracker
	// kicks wakes a carrier's probe loop (chan struct{} by carrier name):
	// failed calls ask for probes to confirm them.
	kicks sync.Map

	// intN picks weighted choices (math/rand/v2's IntN; tests fix it).
	intN func(n int) int
	// routes are the routes of the last snapshot asked for (routeOf).
	routes atomic.Pointer[routeTable]
	// limits are the carriers' limits this node's queues are spaced for
	// (respace.go).
	limits *limitWatch
}

// New builds a Set. It starts no goroutine; Run does.
func New(o Options) (*Set, error) {
	if o.Config == nil {
		return nil, errors.New("carriers: Options.Config is required")
	}
	if o.Pacer == nil {
		return nil, errors.New("carriers: Options.Pacer is required")
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(prometheus.NewRegistry())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Service == nil {
		o.Service = NewLocalService()
	}
	s := &Set{
		cfg: o.Config, pacer: o.Pacer, overrides: o.Overrides, m: o.Metrics, clock: o.Clock, service: o.Service,
		log:      o.Logger.With("component", "carriers"),
		resolver: newResolver(o.Resolver),
		intN:     rand.IntN,
		limits:   newLimitWatch(),
	}
	s.panics = &panics.Reporter{Log: s.log, Count: s.m.Panics}
	s.health = newHealthTracker(o.Clock, s.onHealthChange)
	if cfg := o.Config(); cfg != nil {
		s.syncHealth(cfg)
		s.applyLimits(context.Background(), cfg) // no store call: nothing waits yet
		for i := range cfg.Carriers {
			s.setInService(cfg.Carriers[i].Name)
		}
	}
	return s, nil
}

// Run keeps the Set fresh until ctx ends, then returns once its loops
// have: one probe loop per probed carrier (through prober), the pool's
// pauses, adaptive rates and carriers out of service read every
// RefreshEvery, the carriers' host names resolved every resolveEvery. The caller runs it while prober
// can send (sip.Proxy.Serve does, and ends it before its SIP stack
// closes: a probe against a closed stack would fail).
func (s *Set) Run(ctx context.Context, prober Prober) {
	var wg sync.WaitGroup
	wg.Go(func() { s.runProbes(ctx, prober) })
	wg.Go(func() { s.runRefresh(ctx) })
	wg.Go(func() { s.runResolver(ctx) })
	wg.Wait()
}

// carrier returns the configured carrier named name in the snapshot in
// force (nil: none).
func (s *Set) carrier(name string) (*config.Config, *config.Carrier) {
	cfg := s.cfg()
	if cfg == nil {
		return nil, nil
	}
	return cfg, cfg.Carrier(name)
}

// pacingOf is what pacing needs of car: its slot set, its effective rate
// (an adaptive carrier pushing back runs below its cps) and max_wait.
func (s *Set) pacingOf(cfg *config.Config, car *config.Carrier) pacing.Carrier {
	return policy.Of(cfg).Carrier(car).Pacing(s.effectiveCPS(car))
}

// storeBudget bounds one background store call (an evidence report, a
// pause, a refresh read).
var storeBudget = time.Second

// State is what the node knows of one carrier, as the status API shows
// it.
type State struct {
	// Up reports whether this node's probes (and the calls they
	// confirmed) say the carrier is alive; Since is when it entered that
	// state, Reason why (empty for a carrier up since it was configured).
	Up     bool
	Since  time.Time
	Reason string
	// EffectiveCPS is the rate it is paced at now (EffectiveCPS).
	EffectiveCPS float64
	// InService is false while the carrier is out of service: taken out
	// by hand (Out says by whom, since when, why), or below its min_asr
	// on this node (ASR.Until is set).
	InService bool
	Out       *Out
	// ASR is the carrier's answer-seizure ratio on this node (nil before
	// its first seizure).
	ASR *ASR
}

// State reports what the node knows of the carrier named name; ok is
// false for a carrier not configured.
func (s *Set) State(name string) (st State, ok bool) {
	h, ok := s.health.health(name)
	if !ok {
		return State{}, false
	}
	st = State{Up: h.Up, Since: h.Since, Reason: h.Reason, EffectiveCPS: s.EffectiveCPS(name), InService: true}
	if o, out := s.out.get(name); out {
		st.InService, st.Out = false, &o
	}
	if a, ok := s.asr.get(name, s.clock()); ok {
		st.ASR = &a
		if !a.Until.IsZero() {
			st.InService = false
		}
	}
	return st, true
}

// inService reports whether the carrier named name is in service: not
// taken out by hand, nor below its min_asr.
func (s *Set) inService(name string) bool {
	if _, out := s.out.get(name); out {
		return false
	}
	return !s.asr.out(name, s.clock())
}

// setInService sets cpsguard_carrier_in_service of the carrier named
// name.
func (s *Set) setInService(name string) {
	v := 0.0
	if s.inService(name) {
		v = 1
	}
	s.m.CarrierInService.WithLabelValues(name).Set(v)
}
