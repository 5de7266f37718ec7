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
	"syscall"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// shutdownTimeout bounds a graceful stop of the HTTP server.
const shutdownTimeout = 5 * time.Second

// runServe loads the configuration, sets up logging and runs until SIGINT or
// SIGTERM (exit 0). A configuration that cannot be loaded, or a listener
// that cannot be bound, exits 1.
func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", configPathFlag(), "configuration `file` (also $CPSGUARD_CONFIG)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: cpsguard serve [--config FILE]\n\nRun cpsguard. SIGHUP or a change of FILE reloads the configuration;\nSIGINT or SIGTERM stops it.")
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
		fmt.Fprintf(os.Stderr, "cpsguard serve: %v\n", err)
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
// (changeable) level.
func newLogger(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// logLevel maps a validated log.level to its slog level.
func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// run is the composition root of a running node. It starts every component
// on ctx and returns when ctx is done (nil, after a graceful stop) or when a
// component fails (that error, after stopping the others).
//
// Seams for what comes next:
//   - the SIP proxy is built from mgr (it reads mgr.Current() per call) and
//     started with start("sip", proxy.Run) next to the HTTP server;
//   - the HTTP API and /metrics replace httpHandler(mgr); the API's reload
//     endpoint calls mgr.Reload;
//   - the metrics layer counts reloads with
//     mgr.OnReload(func(r string) { reloads.WithLabelValues(r).Inc() })
//     and refreshes limit gauges from mgr.OnChange.
func run(ctx context.Context, mgr *config.Manager, logger *slog.Logger, level *slog.LevelVar) error {
	cfg := mgr.Current()
	bi := readBuildInfo()
	logger.Info("cpsguard starting", "version", bi.Version, "commit", bi.Commit,
		"config_file", mgr.Path(), "config", cfg)

	mgr.OnChange(func(_, next *config.Config) { level.Set(logLevel(next.Log.Level)) })

	// Bind listeners before starting anything, so a port in use fails
	// start-up with a clear error instead of half a node.
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", cfg.HTTP.Listen, err)
	}
	srv := &http.Server{
		Handler:           httpHandler(mgr),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := func(name string, fn func(context.Context) error) {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				errOnce.Do(func() { firstErr = fmt.Errorf("%s: %w", name, err) })
				cancel()
			}
		})
	}

	start("http", func(ctx context.Context) error { return serveHTTP(ctx, srv, ln) })
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

	logger.Info("cpsguard running", "http_listen", ln.Addr().String(), "store", cfg.StoreMode())
	<-ctx.Done()
	logger.Info("cpsguard stopping")
	wg.Wait()
	return firstErr
}

// httpHandler serves the operations endpoints that exist so far.
func httpHandler(mgr *config.Manager) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	return mux
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
			logger.Info("SIGHUP: reloading configuration", "file", mgr.Path())
			_ = mgr.Reload() // logged and counted by the Manager
		}
	}
}
