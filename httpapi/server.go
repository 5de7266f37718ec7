package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// Counter reads admission windows; admission.Store implementations (and the
// store's Failover) satisfy it.
type Counter interface {
	// Counts returns the calls currently in each bucket's window.
	Counts(ctx context.Context, buckets []admission.Bucket) ([]int, error)
}

// Queuer reads carrier slot queues; pacing.SlotStore implementations (and the
// store's Failover) satisfy it.
type Queuer interface {
	// Queue reports the calls waiting for a slot, the slots of the last
	// second and the least wait of a call reserving now.
	Queue(ctx context.Context, key string, interval time.Duration) (pacing.QueueState, error)
}

// Carriers reports what the node knows of its carriers and takes them out
// of service and back; *carriers.Set satisfies it. ok is false for a name
// that is not a configured carrier.
type Carriers interface {
	// State is what the node knows of the carrier named name.
	State(name string) (st carriers.State, ok bool)
	// TakeOut takes the carrier out of service for the pool and returns
	// the mark it replaced (nil: it was in service).
	TakeOut(ctx context.Context, name, by, reason string) (prev *carriers.Out, ok bool, err error)
	// PutBack puts it back in service and returns the mark it removed
	// (nil: it was in service).
	PutBack(ctx context.Context, name string) (prev *carriers.Out, ok bool, err error)
}

// CallCounter reads max_calls places; calls.Store implementations (and the
// store's CallsFailover) satisfy it.
type CallCounter interface {
	// Count returns the live calls of each place key (policy.CallsKey).
	Count(ctx context.Context, keys []string) ([]int, error)
}

// Options wires the server to the running node. Only Config is required; a
// nil func or interface turns its feature off as documented per field.
type Options struct {
	// Config returns the configuration in use (required). It is called per
	// request, so a reload shows at once, including a changed http.token.
	Config func() *config.Config
	// Counts reads the peer and customer windows. Nil: their Current is null.
	Counts Counter
	// Queue reads the carrier queues and their calls in the last second.
	// Nil: carriers' Current, Queued and Wait are null.
	Queue Queuer
	// Calls reads the live calls of every peer, customer and carrier with
	// max_calls. Nil: their active_calls is null.
	Calls CallCounter
	// Carriers reports what the node knows of each carrier and takes
	// carriers out of service (a *carriers.Set). Nil: carriers' up,
	// health, effective_cps and in_service are omitted and PUT|DELETE
	// .../service answer 501.
	Carriers Carriers
	// StoreMode reports "redis", "fallback" or "local". Nil: "local" when no
	// Redis is configured, else "unknown".
	StoreMode func() string
	// DuplicateNodeID reports whether another process beats in Redis under
	// this node's node_id. Nil: never.
	DuplicateNodeID func() bool
	// Ready reports why the node cannot take calls, or nil when it can. Nil:
	// always ready.
	Ready func() error
	// Reload re-reads the configuration file and swaps it in, or returns why
	// not (a *config.ValidationError for a bad file). Nil: reload answers 501.
	Reload func() error
	// Drain starts the node's drain if it has not started and waits until
	// it is over (nil) or ctx ends (ctx's error): POST /api/v1/drain. Nil:
	// the drain answers 501.
	Drain func(ctx context.Context) error
	// Limits changes and lists the live limit overrides. Nil: the limits
	// API answers 501 and status shows no overrides.
	Limits Limiter
	// Pauses reads and ends carriers' Retry-After pauses. Nil: status
	// shows no pauses and DELETE .../pause answers 501.
	Pauses Pauser
	// LiveCalls lists and ends the pool's live calls (GET and DELETE
	// /api/v1/calls). Nil: they answer 501.
	LiveCalls LiveCalls
	// LoadedAt returns when the configuration in use was loaded. Nil: the
	// first time this server saw the current snapshot.
	LoadedAt func() time.Time
	// ConfigHash identifies a configuration. Nil: ConfigHash.
	ConfigHash func(*config.Config) string
	// Registry is served on /metrics. Nil: /metrics answers 404. Register the
	// Go and process collectors on it yourself (metrics.NewRegistry does);
	// the server adds none.
	Registry prometheus.Gatherer
	// Logger receives reloads and refused requests. Nil: discarded.
	Logger *slog.Logger
	// StatusTimeout bounds the store reads of one status request. Zero: 2 s.
	StatusTimeout time.Duration
}

// New returns the operations handler. It panics when o.Config is nil, a
// wiring mistake found at start-up.
func New(o Options) http.Handler {
	if o.Config == nil {
		panic("httpapi: Options.Config is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ConfigHash == nil {
		o.ConfigHash = ConfigHash
	}
	if o.StatusTimeout <= 0 {
		o.StatusTimeout = 2 * time.Second
	}
	s := &server{o: o}
	if cfg := o.Config(); cfg != nil && cfg.HTTP.Token == "" {
		o.Logger.Info("http.token is empty: the API is read-only (every write: reload, drain, limit changes, carrier unpause, call ends, answers 403 until it is set)",
			"listen", cfg.HTTP.Listen)
	}

	mux := http.NewServeMux()
	if o.Registry != nil {
		mh := promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
			ErrorHandling: promhttp.ContinueOnError,
			// A scraper that asks for OpenMetrics gets it (counters' _created
			// series, exemplars, the # EOF that tells a cut-off scrape); the
			// others still get the text format.
			EnableOpenMetrics: true,
		})
		mux.Handle(PathMetrics, methods(mh, http.MethodGet, http.MethodHead))
	}
	mux.Handle(PathHealthz, methods(http.HandlerFunc(s.healthz), http.MethodGet, http.MethodHead))
	mux.Handle(PathReadyz, methods(http.HandlerFunc(s.readyz), http.MethodGet, http.MethodHead))
	mux.Handle(PathStatus, methods(http.HandlerFunc(s.status), http.MethodGet, http.MethodHead))
	mux.Handle(PathReload, methods(http.HandlerFunc(s.reload), http.MethodPost))
	mux.Handle(PathDrain, methods(http.HandlerFunc(s.drain), http.MethodPost))
	mux.Handle(PathLimits, methods(http.HandlerFunc(s.limitsList), http.MethodGet, http.MethodHead))
	mux.Handle(PathLimits+"/{scope}/{name}", methods(http.HandlerFunc(s.limitsChange), http.MethodPut, http.MethodDelete))
	mux.Handle(PathCarriers+"/{name}/pause", methods(http.HandlerFunc(s.unpause), http.MethodDelete))
	mux.Handle(PathCarriers+"/{name}/service", methods(http.HandlerFunc(s.service), http.MethodPut, http.MethodDelete))
	mux.Handle(PathCalls, methods(http.HandlerFunc(s.callsList), http.MethodGet, http.MethodHead))
	mux.Handle(PathCalls+"/{call_id}", methods(http.HandlerFunc(s.callsEnd), http.MethodDelete))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Code: http.StatusNotFound, Message: "no such path: " + r.URL.Path})
	})
	return mux
}

// NewServer returns an *http.Server for h on addr with timeouts suited to an
// operations endpoint, logging its errors to log (nil: discarded).
func NewServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// ConfigHash returns cfg.Hash(): "sha256:" and the hex SHA-256 of what the
// nodes of a pool must agree on, with the per-node settings
// (config.PerNode) left out and the secrets redacted, so it can be served
// and two nodes running one file show one hash. It is also the config_hash
// label of cpsguard_config_info.
func ConfigHash(cfg *config.Config) string {
	return cfg.Hash()
}

type server struct {
	o Options
	// seen caches the hash and first-seen time of the last snapshot.
	seen     atomic.Pointer[snapshot]
	reloadMu sync.Mutex
	// listing is held while GET /api/v1/calls runs: the pool's whole list
	// is read and copied for each, so one runs at a time (livecalls.go).
	listing sync.Mutex
	// statusFlight is the status being built, shared by the requests
	// that arrive meanwhile (sharedStatus); guarded by statusMu.
	statusMu     sync.Mutex
	statusFlight *statusFlight
	// refusals bounds the warn lines of refused writes (refusals.go).
	refusals refusalLog
}

type snapshot struct {
	cfg  *config.Config
	hash string
	at   time.Time
}

// snapshotOf returns the hash and load time of cfg, computing the hash once
// per snapshot.
func (s *server) snapshotOf(cfg *config.Config) *snapshot {
	if sn := s.seen.Load(); sn != nil && sn.cfg == cfg {
		return sn
	}
	sn := &snapshot{cfg: cfg, hash: s.o.ConfigHash(cfg), at: time.Now()}
	s.seen.Store(sn)
	return sn
}

func (s *server) loadedAt(sn *snapshot) time.Time {
	if s.o.LoadedAt != nil {
		return s.o.LoadedAt()
	}
	return sn.at
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Health{Status: "unavailable", Error: err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
}

func (s *server) status(w http.ResponseWriter, r *http.Request) {
	cfg := s.o.Config()
	if cfg == nil {
		writeError(w, &Error{Code: http.StatusServiceUnavailable, Message: "no configuration loaded"})
		return
	}
	st, ok := s.sharedStatus(r.Context(), cfg)
	if !ok {
		return // the client went away while it waited
	}
	writeJSON(w, http.StatusOK, st)
}

// statusFlight is one status being built; the requests that arrive
// meanwhile wait for it and answer with it.
type statusFlight struct {
	cfg  *config.Config
	done chan struct{}
	st   Status
}

// sharedStatus builds cfg's status, or waits for the one being built for
// cfg: the reads need no token, and each build reads every window and
// queue from the admission store, so one runs at a time however many
// requests come (any number at once would slow the calls' own store
// calls). The build has StatusTimeout and goes on when the request that
// started it goes away; ok is false when ctx ends first.
func (s *server) sharedStatus(ctx context.Context, cfg *config.Config) (st Status, ok bool) {
	for {
		s.statusMu.Lock()
		f := s.statusFlight
		if f == nil {
			f = &statusFlight{cfg: cfg, done: make(chan struct{})}
			s.statusFlight = f
			s.statusMu.Unlock()
			s.runStatus(ctx, f)
			return f.st, true
		}
		s.statusMu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return Status{}, false
		}
		if f.cfg == cfg {
			return f.st, true
		}
		// Built for the configuration before a reload: build this one's.
	}
}

// runStatus builds f's status and publishes it to its waiters.
func (s *server) runStatus(ctx context.Context, f *statusFlight) {
	defer func() {
		s.statusMu.Lock()
		s.statusFlight = nil
		s.statusMu.Unlock()
		close(f.done)
	}()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.StatusTimeout)
	defer cancel()
	f.st = s.buildStatus(bctx, f.cfg)
}

func (s *server) storeMode(cfg *config.Config) string {
	if s.o.StoreMode != nil {
		return s.o.StoreMode()
	}
	if cfg.Store.Redis == nil {
		return "local"
	}
	return "unknown"
}

// buildStatus reads every window and queue of cfg from the store.
func (s *server) buildStatus(ctx context.Context, cfg *config.Config) Status {
	sn := s.snapshotOf(cfg)
	st := Status{
		NodeID:     cfg.NodeID,
		StoreMode:  s.storeMode(cfg),
		ConfigHash: sn.hash,
		LoadedAt:   s.loadedAt(sn).UTC(),
		Peers:      make([]Entry, len(cfg.Peers)),
		Customers:  make([]Entry, len(cfg.Customers)),
		Carriers:   make([]Entry, len(cfg.Carriers)),
	}
	// The keys and parsed values the proxy uses, from the same derivation.
	pol := policy.Of(cfg)

	now := time.Now()
	peerBuckets := make([][]admission.Bucket, len(cfg.Peers))
	for i := range cfg.Peers {
		st.Peers[i], peerBuckets[i] = s.scopeEntry(cfg, limits.ScopePeer, pol.Peer(&cfg.Peers[i]), cfg.Peers[i].Windows, now)
	}
	custBuckets := make([][]admission.Bucket, len(cfg.Customers))
	for i := range cfg.Customers {
		st.Customers[i], custBuckets[i] = s.scopeEntry(cfg, limits.ScopeCustomer, pol.Customer(&cfg.Customers[i]), cfg.Customers[i].Windows, now)
	}
	dests := pol.Destinations()
	if len(dests) > 0 {
		st.Destinations = make([]Entry, len(dests))
	}
	destBuckets := make([][]admission.Bucket, len(dests))
	for i := range dests {
		st.Destinations[i], destBuckets[i] = s.destinationEntry(cfg, &dests[i], cfg.Destinations[i], now)
	}
	if s.o.Counts != nil {
		st.Errors = append(st.Errors, s.fillCounts(ctx, "peers", st.Peers, peerBuckets)...)
		st.Errors = append(st.Errors, s.fillCounts(ctx, "customers", st.Customers, custBuckets)...)
		st.Errors = append(st.Errors, s.fillCounts(ctx, "destinations", st.Destinations, destBuckets)...)
	}
	if rd := cfg.RepeatDial; rd.Calls > 0 {
		st.RepeatDial = &RepeatDialState{Calls: rd.Calls, PerSeconds: rd.Per.Seconds(), Shadow: cfg.Shadow || rd.Shadow}
	}

	for i, c := range cfg.Carriers {
		cps, ov := s.override(cfg, limits.ScopeCarrier, c.Name, c.CPS, now)
		e := Entry{
			Name: c.Name, LimitCPS: cps, Override: ov,
			WindowLimit: cps, WindowSeconds: 1,
			MaxWaitSeconds: c.MaxWait.Seconds(),
		}
		key := pol.Carrier(&cfg.Carriers[i]).Key
		if s.o.Queue != nil {
			q, err := s.o.Queue.Queue(ctx, key, pacing.Interval(cps))
			if err != nil {
				st.Errors = append(st.Errors, "carrier "+c.Name+": queue: "+err.Error())
			} else {
				ws := q.Wait.Seconds()
				e.Queued, e.WaitSeconds = &q.Queued, &ws
				e.setCurrent(q.Sent)
			}
		}
		if s.o.Carriers != nil {
			if cs, ok := s.o.Carriers.State(c.Name); ok {
				up := cs.Up
				e.Up = &up
				if cs.Reason != "" {
					e.Health = cs.Reason
					if !cs.Since.IsZero() {
						e.Health += " (since " + cs.Since.UTC().Format(time.RFC3339) + ")"
					}
				}
				if cs.EffectiveCPS > 0 {
					eff := cs.EffectiveCPS
					e.EffectiveCPS = &eff
				}
				in := cs.InService
				e.InService = &in
				if cs.Out != nil {
					e.OutOfService = serviceView(*cs.Out)
				}
				if a := cs.ASR; a != nil {
					e.ASR = &CarrierASR{Percent: a.Percent, Seizures: a.Seizures, Answered: a.Answered,
						WindowSeconds: a.Window.Seconds(), Reason: a.Reason}
					if !a.Until.IsZero() {
						u := a.Until.UTC().Truncate(time.Millisecond)
						e.ASR.OutUntil = &u
					}
				}
			}
		}
		if s.o.Pauses != nil {
			pz, ok, err := s.o.Pauses.CarrierPause(ctx, c.Name)
			switch {
			case err != nil:
				st.Errors = append(st.Errors, "carrier "+c.Name+": pause: "+err.Error())
			case ok && pz.Paused:
				e.Pause = pauseView(pz, now)
			}
		}
		st.Carriers[i] = e
	}
	st.Errors = append(st.Errors, s.fillCalls(ctx, pol, &st)...)
	if s.o.DuplicateNodeID != nil {
		st.DuplicateNodeID = s.o.DuplicateNodeID()
	}
	st.Time = time.Now().UTC()
	return st
}

// fillCalls sets max_calls of every entry and reads active_calls, pool-wide,
// of those with a limit, in one store call.
func (s *server) fillCalls(ctx context.Context, pol *policy.Policy, st *Status) []string {
	cfg := pol.Config()
	var keys []string
	var targets []*Entry
	add := func(e *Entry, key string, limit int) {
		e.MaxCalls = limit
		if limit > 0 {
			keys = append(keys, key)
			targets = append(targets, e)
		}
	}
	for i := range cfg.Peers {
		add(&st.Peers[i], pol.Peer(&cfg.Peers[i]).CallsKey, cfg.Peers[i].MaxCalls)
	}
	for i := range cfg.Customers {
		add(&st.Customers[i], pol.Customer(&cfg.Customers[i]).CallsKey, cfg.Customers[i].MaxCalls)
	}
	for i := range cfg.Carriers {
		add(&st.Carriers[i], pol.Carrier(&cfg.Carriers[i]).CallsKey, cfg.Carriers[i].MaxCalls)
	}
	for i, d := range pol.Destinations() {
		if i < len(st.Destinations) && i < len(cfg.Destinations) {
			add(&st.Destinations[i], d.CallsKey, cfg.Destinations[i].MaxCalls)
		}
	}
	if s.o.Calls == nil || len(keys) == 0 {
		return nil
	}
	n, err := s.o.Calls.Count(ctx, keys)
	if err == nil && len(n) != len(keys) {
		err = errors.New("store returned a wrong number of counts")
	}
	if err != nil {
		return []string{"active calls: " + err.Error()}
	}
	for i, e := range targets {
		v := n[i]
		e.ActiveCalls = &v
	}
	return nil
}

// override returns the cps in force for scope's name (limits.InForce: the
// configured cps, or the live override's) and the override to show, if
// any.
func (s *server) override(cfg *config.Config, scope, name string, cps float64, now time.Time) (float64, *LimitOverride) {
	cps, _, ov := s.overrideBurst(cfg, scope, name, cps, 0, now)
	return cps, ov
}

// overrideBurst is override for a peer or customer: the cps and burst in
// force (an override without a burst keeps the configured one).
func (s *server) overrideBurst(cfg *config.Config, scope, name string, cps float64, burst int, now time.Time) (float64, int, *LimitOverride) {
	if s.o.Limits == nil {
		return cps, burst, nil
	}
	cps, burst = limits.InForce(s.o.Limits, scope, name, cps, burst)
	o, ok := s.o.Limits.Lookup(scope, name)
	if !ok {
		return cps, burst, nil
	}
	v := overrideView(cfg, o, now)
	return cps, burst, &v
}

// scopeEntry builds the entry of a peer or customer at the limits in
// force and returns the buckets admission decides it by (a token bucket
// or the 1 s window, then each extra window), which fillCounts reads.
func (s *server) scopeEntry(cfg *config.Config, scope string, sc *policy.Scoped, windows []config.Window, now time.Time) (Entry, []admission.Bucket) {
	cps, burst, ov := s.overrideBurst(cfg, scope, sc.Name, sc.CPS, sc.Burst, now)
	e := Entry{Name: sc.Name, LimitCPS: cps, Override: ov}
	var bs []admission.Bucket
	if cps > 0 {
		bs = sc.Buckets(cps, burst)
	} else {
		bs = []admission.Bucket{sc.Window(cps)}
	}
	first := bs[0]
	e.WindowLimit = float64(first.Limit)
	if first.RateMicros > 0 {
		e.Burst = burst
	} else {
		e.WindowSeconds = first.Window.Seconds()
	}
	for _, w := range windows {
		e.Windows = append(e.Windows, WindowState{Calls: w.Calls, PerSeconds: w.Per.Seconds()})
	}
	if len(bs)-1 != len(e.Windows) {
		bs = bs[:1] // not the configured windows: show none rather than wrong ones
		e.Windows = nil
	}
	return e, bs
}

// destinationEntry builds the entry of destination d (configured as c),
// named by its prefix as configured: as a peer's with a cps; without one,
// only its extra windows are counted (its buckets are those windows).
func (s *server) destinationEntry(cfg *config.Config, d *policy.Destination, c config.Destination, now time.Time) (Entry, []admission.Bucket) {
	if d.CPS > 0 {
		e, bs := s.scopeEntry(cfg, limits.ScopeDestination, &d.Scoped, c.Windows, now)
		e.Name = c.Prefix
		return e, bs
	}
	e := Entry{Name: c.Prefix}
	for _, w := range c.Windows {
		e.Windows = append(e.Windows, WindowState{Calls: w.Calls, PerSeconds: w.Per.Seconds()})
	}
	bs := d.Buckets(0, 0)
	if len(bs) != len(e.Windows) {
		bs, e.Windows = nil, nil // not the configured windows: show none rather than wrong ones
	}
	return e, bs
}

// fillCounts reads the buckets of every entry (buckets[i] are entries[i]'s,
// its first bucket then its extra windows; a destination without cps has
// only its windows) in one store call.
func (s *server) fillCounts(ctx context.Context, what string, entries []Entry, buckets [][]admission.Bucket) []string {
	var all []admission.Bucket
	for _, bs := range buckets {
		all = append(all, bs...)
	}
	if len(all) == 0 {
		return nil
	}
	counts, err := s.o.Counts.Counts(ctx, all)
	if err == nil && len(counts) != len(all) {
		err = errors.New("store returned a wrong number of counts")
	}
	if err != nil {
		return []string{what + ": counts: " + err.Error()}
	}
	for i, bs := range buckets {
		e := &entries[i]
		n, rest := counts[:len(bs)], counts[len(bs):]
		counts = rest
		// The first bucket is the entry's own (its 1 s window or token
		// bucket) unless it has only its extra windows.
		main := len(bs) - len(e.Windows)
		if main == 1 && n[0] >= 0 {
			e.setCurrent(n[0])
			if e.Burst > 0 {
				left := max(0, e.Burst-n[0])
				e.Tokens = &left
			}
		}
		for j := range e.Windows {
			if c := n[j+main]; c >= 0 {
				w := &e.Windows[j]
				w.Current = &c
				if w.Calls > 0 {
					p := 100 * float64(c) / float64(w.Calls)
					w.Percent = &p
				}
			}
		}
	}
	return nil
}

func (e *Entry) setCurrent(n int) {
	e.Current = &n
	if e.WindowLimit > 0 {
		p := 100 * float64(n) / e.WindowLimit
		e.Percent = &p
	}
}

func (s *server) reload(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, "reload") {
		return
	}
	if s.o.Reload == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "reload is not available on this node"})
		return
	}

	s.reloadMu.Lock()
	err := s.o.Reload()
	s.reloadMu.Unlock()
	if err != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			s.o.Logger.Warn("reload via api: configuration rejected, previous one stays in use",
				"remote", r.RemoteAddr, "file", ve.File, "errors", len(ve.Errors))
			writeError(w, &Error{
				Code:    http.StatusUnprocessableEntity,
				Message: "configuration rejected; the previous configuration stays in use",
				Errors:  ve.Placed(),
			})
			return
		}
		s.o.Logger.Warn("reload via api failed, previous configuration stays in use", "remote", r.RemoteAddr, "error", err)
		writeError(w, &Error{
			Code:    http.StatusInternalServerError,
			Message: "reload failed; the previous configuration stays in use",
			Errors:  strings.Split(err.Error(), "\n"),
		})
		return
	}
	res := ReloadResult{Status: "reloaded"}
	if cfg := s.o.Config(); cfg != nil {
		sn := s.snapshotOf(cfg)
		res.ConfigHash, res.LoadedAt = sn.hash, s.loadedAt(sn).UTC()
	}
	s.o.Logger.Info("configuration reloaded via api", "remote", r.RemoteAddr, "config_hash", res.ConfigHash)
	writeJSON(w, http.StatusOK, res)
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	t := strings.TrimSpace(h[len(p):])
	return t, t != ""
}

// tokenEqual compares in constant time; hashing first hides the length too.
func tokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// methods answers 405 with an Allow header to any other method.
func methods(h http.Handler, allowed ...string) http.Handler {
	allow := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range allowed {
			if r.Method == m {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		writeError(w, &Error{Code: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed; use " + allow})
	})
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Code, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	writeJSONBody(w, code, encodeJSON(v))
}

// encodeJSON is v as writeJSON writes it.
func encodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "cps: must be > 0", not "\u003e"
	_ = enc.Encode(v)        // an error (none for the API's types) writes nothing
	return b.Bytes()
}

// writeJSONBody writes body, JSON encodeJSON made, with code.
func writeJSONBody(w http.ResponseWriter, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body) // the client went away; nothing to do
}

// loopback reports whether listen ("host:port") binds only loopback.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
