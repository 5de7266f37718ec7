// Command cpsguard-prof is a benchmark build of a cpsguard node with
// net/http/pprof: the same composition as `cpsguard serve` (config, store
// with failover, pacer, SIP proxy, metrics) minus the operations API, plus
// /debug/pprof/ on the HTTP listener. It exists so the benchmark suite can
// profile the per-call path under load without touching the product; it is
// never shipped.
//
//	cpsguard-prof serve --config FILE     (serves /metrics, /readyz, /debug/pprof/)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the point of this build
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/gctune"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/sip"
	"github.com/cpsguard/cpsguard/store"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: cpsguard-prof serve --config FILE")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	path := fs.String("config", "", "configuration `file`")
	_ = fs.Parse(os.Args[2:])
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "cpsguard-prof:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	mgr, err := config.NewManager(path)
	if err != nil {
		return err
	}
	cfg := mgr.Current()
	gctune.Apply() // as the node does
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(logger)
	store.RouteRedisLogs(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := metrics.NewRegistry()
	m := metrics.New(reg)
	m.SyncLimits(cfg)
	stores, err := store.Open(ctx, cfg, store.OpenOptions{Observe: m.ObserveStore, Logger: logger})
	if err != nil {
		return err
	}
	defer stores.Close()
	proxy, err := sip.New(sip.Options{Config: mgr.Current, Admission: stores, Pacer: pacing.NewPacer(stores), Metrics: m, Logger: logger})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return err
	}
	mux := http.DefaultServeMux // carries /debug/pprof/
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-proxy.Ready():
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	go stores.Run(ctx)
	if err := proxy.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
