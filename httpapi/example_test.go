package httpapi_test

import (
	"errors"
	"log"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
)

// Wiring the operations server into a node. With Redis, pass the store's
// Failover as Counts and Queue and its Mode as StoreMode.
func ExampleNew() {
	mgr, err := config.NewManager("/etc/cpsguard/cpsguard.yaml")
	if err != nil {
		log.Fatal(err)
	}
	reg := metrics.NewRegistry() // with the Go and process collectors
	m := metrics.New(reg)
	m.SyncLimits(mgr.Current())

	var loadedAt atomic.Int64
	loadedAt.Store(time.Now().UnixNano())
	mgr.OnReload(m.ObserveReload)
	mgr.OnChange(func(_, next *config.Config) {
		m.SyncLimits(next)
		loadedAt.Store(time.Now().UnixNano())
	})

	adm := admission.NewLocalStore(time.Now)
	slots := pacing.NewLocalSlots(time.Now)
	var sipUp atomic.Bool // set by the SIP proxy once it listens

	h := httpapi.New(httpapi.Options{
		Config:    mgr.Current,
		Counts:    adm,
		Queue:     slots,
		StoreMode: func() string { return "local" },
		Ready: func() error {
			if !sipUp.Load() {
				return errors.New("sip listeners not up")
			}
			return nil
		},
		Reload:   mgr.Reload,
		LoadedAt: func() time.Time { return time.Unix(0, loadedAt.Load()) },
		Registry: reg,
		Logger:   slog.Default(),
	})
	srv := httpapi.NewServer(mgr.Current().HTTP.Listen, h, slog.Default())
	log.Fatal(srv.ListenAndServe())
}
