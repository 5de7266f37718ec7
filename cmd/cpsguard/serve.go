package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/internal/gctune"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/internal/safetext"
	"github.com/cpsguard/cpsguard/internal/sdnotify"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/records"
	"github.com/cpsguard/cpsguard/sip"
	"github.com/cpsguard/cpsguard/store"
)

// shutdownTimeout bounds a graceful stop of the HTTP server.
const shutdownTimeout = 5 * time.Second

// httpHandler is what the HTTP listener serves around the operations API:
// the API itself, or in the benchmark suite's profiling build (-tags
// cpsguardprof, pprof.go) the API plus /debug/pprof/.
var httpHandler = func(api http.Handler) http.Handler { return api }

// runServe loads the configuration, sets up logging and runs until SIGINT or
// SIGTERM (exit 0). A configuration that cannot be loaded, or a listener
// that cannot be bound, exits 1.
func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", configPathFlag(), "configuration `file` (also $CPSGUARD_CONFIG)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: cpsguard serve [--config FILE]\n\nRun cpsguard. SIGHUP or a change of FILE reloads the configuration;\nSIGTERM or SIGINT drains it (new INVITEs get 503; calls in progress get\nsip.drain_grace to finish), then stops it.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cpsguard serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}

	mgr, err := config.NewManager(*path)
	if err != nil {
		printLoadError(os.Stderr, "serve", *path, err)
		return exitFail
	}
	cfg := mgr.Current()
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.Log.Level))
	logger := newLogger(os.Stderr, cfg.Log.Format, level)
	slog.SetDefault(logger)
	mgr.SetLogger(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, mgr, logger, level); err != nil {
		logger.Error("cpsguard stopped on error", "error", err.Error())
		return exitFail
	}
	logger.Info("cpsguard stopped")
	return exitOK
}

// newLogger builds the process logger: "json" or "text" on w, at the
// (changeable) level. Durations are written as Go duration strings
// ("retry_after":"2s"), not as JSON's integer nanoseconds.
func newLogger(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}
	// Strings from peers, carriers and Redis replies are logged escaped
	// (controls and Unicode format characters: safetext).
	if format == "text" {
		return slog.New(safetext.NewHandler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(safetext.NewHandler(slog.NewJSONHandler(w, opts)))
}

// durationString is a slog ReplaceAttr that writes a time.Duration as its
// String ("1.5s"), in every group.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// logLevel maps a validated log.level to its slog level.
func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// run is the composition root of a running node: metrics, the store (Redis
// with its fallback, or in-process), the SIP proxy and the operations HTTP
// server. It returns when ctx is done (nil, after a graceful stop) or when a
// component fails (that error, after stopping the others).
//
// On ctx done (SIGINT/SIGTERM) the node drains: new INVITEs get 503, calls
// waiting for a slot are sent or rejected within sip.drain_grace, in-flight
// transactions finish, then the listeners close. POST /api/v1/drain starts
// the same drain without stopping the process: HTTP goes on (readyz 503)
// until SIGTERM. Under systemd (Type=notify) the node sends READY=1 once
// its listeners are bound and STOPPING=1 when a stop starts its drain.
func run(ctx context.Context, mgr *config.Manager, logger *slog.Logger, level *slog.LevelVar) error {
	cfg := mgr.Current()
	bi := readBuildInfo()
	gc := gctune.Apply()
	var memLimit any = gc.MemoryLimit
	if gc.LimitSource == "none" {
		memLimit = "none"
	}
	logger.Info("cpsguard starting", "version", bi.Version, "commit", bi.Commit,
		"config_file", mgr.Path(), "config", cfg,
		"gogc", gc.GCPercent, "gogc_from", gc.GCSource,
		"memory_limit", memLimit, "memory_limit_from", gc.LimitSource)
	store.RouteRedisLogs(logger)
	for _, w := range config.Warnings(cfg) {
		logger.Warn("configuration: " + w)
	}

	reg := metrics.NewRegistry()
	m := metrics.New(reg)
	m.SetBuildInfo(bi.Version, bi.Commit, bi.GoVersion)
	m.SyncLimits(cfg)
	var loadedAt atomic.Int64
	loadedAt.Store(time.Now().UnixNano())
	// Call records (records.*): a sink that cannot be opened is logged and
	// left closed; the node runs on without it (calls come first).
	recs := records.New(records.Options{Written: m.RecordsWritten, Dropped: m.RecordsDropped,
		Logger: logger.With("component", "records")})
	defer recs.Close() // after every component has stopped: shutdown records are written
	if err := recs.Apply(cfg.Records); err != nil {
		logger.Error("call records: a sink could not be opened; its records are lost until a reload fixes it", "error", err.Error())
	}
	mgr.OnReload(m.ObserveReload)
	mgr.OnChange(func(_, next *config.Config) {
		level.Set(logLevel(next.Log.Level))
		m.SyncLimits(next)
		loadedAt.Store(time.Now().UnixNano())
		if err := recs.Apply(next.Records); err != nil {
			logger.Error("call records: a sink could not be opened; its records are lost until a reload fixes it", "error", err.Error())
		}
	})

	// The tracker (built below, on the stores) is kicked when Redis is back
	// in use: the calls this node set up in the fallback take their places
	// in the pool's sets at once, not at the next refresh period.
	var liveCalls atomic.Pointer[calls.Tracker]
	// This node's own version of the scripts: after a Redis restart every
	// node meets NOSCRIPT, and so learns Redis may have lost the pool's
	// last window (store's careful spans), not only the first one to run
	// each script.
	lua.SetVariant(cfg.NodeID)
	stores, err := store.Open(ctx, cfg, store.OpenOptions{
		Observe: m.ObserveStore,
		OnMode: func(mode string) {
			if mode == store.ModeRedis {
				m.StoreUp.Set(1)
				if tr := liveCalls.Load(); tr != nil {
					tr.Kick()
				}
			} else {
				m.StoreUp.Set(0)
			}
		},
		OnDuplicateNodeID: func(dup bool) {
			if dup {
				m.DuplicateNodeID.Set(1)
			} else {
				m.DuplicateNodeID.Set(0)
			}
		},
		Logger: logger.With("component", "store"),
		Panics: &panics.Reporter{Log: logger.With("component", "store"), Count: m.Panics},
	})
	if err != nil {
		return err
	}
	defer stores.Close()
	if stores.Mode() == store.ModeRedis {
		m.StoreUp.Set(1)
	}
	// bgTimeout bounds the Redis calls of the stores below, which no SIP
	// call waits for (store.BackgroundTimeout).
	var bgTimeout time.Duration
	if cfg.Store.Redis != nil {
		bgTimeout = store.BackgroundTimeout(cfg.Store.Redis.Timeout)
	}

	// The pool's list of live calls (GET /api/v1/calls) and the nodes' end
	// queues: in the same Redis, else in this process.
	var registry calls.Registry = calls.NewLocalRegistry(nil)
	if rc := stores.RedisClient(); rc != nil {
		// Written in the background and read by the API: no SIP call
		// waits for it.
		registry = calls.NewRedisRegistry(rc, cfg.Store.KeyPrefix, calls.RegistryOptions{
			Timeout: bgTimeout, Observe: m.ObserveStore})
	}
	// The calls this node sets up: their max_calls places and their
	// listing; TTL and maximum duration are read at start. Failed frees,
	// refreshes and listings are counted by the store's observer
	// (cpsguard_store_errors_total{script}).
	tracker := calls.NewTracker(stores.Calls, calls.TrackerOptions{
		TTL:         cfg.SIP.CallRefreshTTL,
		MaxDuration: cfg.SIP.MaxCallDuration,
		Logger:      logger.With("component", "calls"),
		Registry:    registry,
	})
	liveCalls.Store(tracker)
	// Limit overrides (PUT /api/v1/limits): pool-wide in the same Redis,
	// else in this process. The view starts with what the store holds and
	// keeps cpsguard_limit_cps on the limit in force.
	var limStore limits.Store = limits.NewLocalStore(nil)
	if rc := stores.RedisClient(); rc != nil {
		// No SIP call waits for these (calls read the snapshot): an
		// operator's write or the refresh's read gets the background bound.
		limStore = limits.NewRedisStore(rc, cfg.Store.KeyPrefix, limits.RedisOptions{
			Timeout: bgTimeout, Observe: m.ObserveStore})
	}
	overrides := limits.New(limStore, limits.Options{
		Logger:   logger.With("component", "limits"),
		OnChange: func([]limits.Override) { m.SyncLimits(mgr.Current()) },
		Panics:   &panics.Reporter{Log: logger.With("component", "limits"), Count: m.Panics},
	})
	m.SetLimitOverrides(overrides)
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	_ = overrides.Refresh(rctx) // a failure is logged; Run retries
	rcancel()

	// The ends of dialogs, shared by the pool through the same Redis, so a
	// dialog token dies on every node; without Redis each node knows the
	// ends it saw.
	var dialogEnds sip.DialogEnds
	if rc := stores.RedisClient(); rc != nil {
		// Exchanged by one goroutine of the proxy's: no SIP call waits.
		dialogEnds = calls.NewRedisEnded(rc, policy.EndedDialogsKey(cfg.Store.KeyPrefix),
			calls.RedisOptions{Timeout: bgTimeout, Observe: m.ObserveStore})
	}

	// The carriers: health, pauses, adaptive rates, addresses and route
	// order, on the pool's pacing store; the proxy runs it, the API reads
	// it.
	pacer := pacing.NewPacer(stores)
	// Carriers out of service by hand: pool-wide in the same Redis, else
	// in this process.
	var service carriers.ServiceStore
	if rc := stores.RedisClient(); rc != nil {
		// Read by the carriers' refresh loop, written by operators: no
		// SIP call waits for it.
		service = carriers.NewRedisService(rc, cfg.Store.KeyPrefix, bgTimeout, m.ObserveStore)
	}
	carrierSet, err := carriers.New(carriers.Options{
		Config:    mgr.Current,
		Pacer:     pacer,
		Service:   service,
		Overrides: overrides,
		Metrics:   m,
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	proxy, err := sip.New(sip.Options{
		Overrides: overrides,
		Config:    mgr.Current,
		Calls:     tracker,
		Admission: stores,
		Pacer:     pacer,
		Carriers:  carrierSet,
		Metrics:   m,
		Logger:    logger,
		Usable:    stores.Usable,

		OpaqueTokens: stores.OpaqueTokens,
		DialogEnds:   dialogEnds,
		Records:      recs,
	})
	if err != nil {
		return err
	}
	// Live calls for the operations API: listed pool-wide, ended by the
	// node that holds them (another node's through its end queue).
	pool := &calls.Pool{Registry: registry, Node: cfg.NodeID, Local: tracker.List, End: proxy.EndCalls,
		Logger: logger.With("component", "calls")}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The SIP side drains when the node stops (ctx) or when POST
	// /api/v1/drain asks (drainSIP): the HTTP side then keeps serving until
	// the process is stopped, with /readyz failing.
	sipCtx, drainSIP := context.WithCancel(ctx)
	defer drainSIP()
	sipDone := make(chan struct{})
	drain := func(rctx context.Context) error {
		if sipCtx.Err() == nil {
			logger.Info("draining on request: new calls get 503, calls in progress have sip.drain_grace",
				"drain_grace", mgr.Current().SIP.DrainGrace)
			notify(logger, sdnotify.Status("draining (api)"))
		}
		drainSIP()
		select {
		case <-sipDone:
			return nil
		case <-rctx.Done():
			return rctx.Err()
		}
	}
	// Bind the HTTP listener before starting anything, so a port in use
	// fails start-up with a clear error instead of half a node.
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", cfg.HTTP.Listen, err)
	}
	ln = httpapi.Listener(ln) // bounded: its descriptors are SIP's too
	srv := httpapi.NewServer(cfg.HTTP.Listen, httpHandler(httpapi.New(httpapi.Options{
		Config:          mgr.Current,
		Counts:          stores,
		Queue:           stores,
		Calls:           stores.Calls,
		StoreMode:       stores.Mode,
		DuplicateNodeID: stores.DuplicateNodeID,
		Ready: func() error {
			select {
			case <-proxy.Ready():
			default:
				return errors.New("sip listeners not up")
			}
			if proxy.Draining() {
				// Fail at once, so a load balancer or a Kubernetes Service
				// stops sending while calls in progress finish.
				return errors.New("draining: shutting down")
			}
			if !stores.Usable() {
				return errors.New("store unusable: redis down and store.on_error is reject")
			}
			return nil
		},
		Carriers:  carrierSet,
		Limits:    overrides,
		Pauses:    carrierSet,
		LiveCalls: pool,
		Reload:    func() error { return mgr.ReloadBy(config.TriggerAPI) },
		Drain:     drain,
		LoadedAt:  func() time.Time { return time.Unix(0, loadedAt.Load()) },
		Registry:  reg,
		Logger:    logger.With("component", "http"),
	})), logger)

	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := func(name string, fn func(context.Context) error) {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				errOnce.Do(func() {
					// Name the component, unless its error does already
					// ("sip: listen …", not "sip: sip: listen …").
					firstErr = err
					if !strings.HasPrefix(err.Error(), name+": ") {
						firstErr = fmt.Errorf("%s: %w", name, err)
					}
				})
				cancel()
			}
		})
	}

	// HTTP outlives the SIP drain: /readyz answers 503 from the moment
	// draining starts (so a load balancer or a Kubernetes Service stops
	// sending) until the proxy has finished its calls, and /metrics stays
	// scrapable meanwhile.
	httpCtx, httpCancel := context.WithCancel(context.Background())
	defer httpCancel()
	start("store", func(ctx context.Context) error { stores.Run(ctx); return nil })
	start("calls", func(ctx context.Context) error { tracker.Run(ctx); return nil })
	start("active_calls", func(ctx context.Context) error {
		syncActiveCalls(ctx, mgr.Current, stores.Calls, m)
		return nil
	})
	start("limits", func(ctx context.Context) error { overrides.Run(ctx); return nil })
	start("end-queue", func(ctx context.Context) error { pool.Run(ctx); return nil })
	start("sip", func(context.Context) error {
		defer close(sipDone)
		return proxy.Serve(sipCtx)
	})
	start("http-stop", func(ctx context.Context) error {
		<-ctx.Done()
		<-sipDone
		httpCancel()
		return nil
	})
	start("http", func(context.Context) error {
		err := serveHTTP(httpCtx, srv, ln)
		if err != nil {
			httpCancel()
		}
		return err
	})
	start("config-watch", func(ctx context.Context) error {
		// Not fatal: SIGHUP and the API still reload.
		if err := mgr.Watch(ctx); err != nil {
			logger.Error("config file watch unavailable; reload with SIGHUP", "error", err.Error())
		}
		return nil
	})
	// Subscribe before anything can send SIGHUP's default action (exit).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	start("sighup", func(ctx context.Context) error { reloadOnSIGHUP(ctx, hup, mgr, logger); return nil })

	select {
	case <-proxy.Ready():
		logger.Info("cpsguard running", "sip", strings.Join(proxy.Addrs(), ","),
			"http_listen", ln.Addr().String(), "store", stores.Mode())
		// systemd (Type=notify): started once SIP and HTTP are bound.
		notify(logger, sdnotify.Ready, sdnotify.Status("serving SIP on "+strings.Join(proxy.Addrs(), ",")))
	case <-ctx.Done():
	}
	<-ctx.Done()
	logger.Info("cpsguard stopping")
	notify(logger, sdnotify.Stopping, sdnotify.Status("draining"))
	wg.Wait()
	return firstErr
}

// notify tells systemd the node's state when it runs as a Type=notify
// service; a failure is logged, never fatal.
func notify(logger *slog.Logger, lines ...string) {
	if _, err := sdnotify.Notify(lines...); err != nil {
		logger.Warn("cannot notify systemd", "state", lines[0], "error", err.Error())
	}
}

// serveHTTP serves on ln until ctx is done, then shuts down gracefully.
func serveHTTP(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err // Serve never returns nil
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reloadOnSIGHUP reloads the configuration on every signal on hup until ctx is
// done. Failures are logged and counted by the Manager.
func reloadOnSIGHUP(ctx context.Context, hup <-chan os.Signal, mgr *config.Manager, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = mgr.ReloadBy(config.TriggerSIGHUP) // logged (trigger "sighup") and counted by the Manager
		}
	}
}
