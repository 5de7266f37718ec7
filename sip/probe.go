package sip

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/health"
	"github.com/cpsguard/cpsguard/metrics"
)

// probeSyncEvery is how often the prober looks for a new configuration
// snapshot (a reload that adds, removes or changes carriers).
var probeSyncEvery = 500 * time.Millisecond

// probeSpec is what one carrier's probe loop runs on; a change of either
// restarts the loop.
type probeSpec struct {
	uri   string
	probe config.Probe
}

// onHealthChange logs and exports a carrier going down or coming up.
func (p *Proxy) onHealthChange(c health.Change) {
	if c.Notice {
		p.log.Warn("carrier probes ignored: calls are answered but probes are not", "carrier", c.Carrier, "reason", c.Reason)
		return
	}
	v := 0.0
	if c.Up {
		v = 1
		p.log.Info("carrier up: calls go to it again", "carrier", c.Carrier, "reason", c.Reason)
	} else {
		p.log.Warn("carrier down: calls skip it until its probes answer", "carrier", c.Carrier, "reason", c.Reason)
	}
	p.m.CarrierUp.WithLabelValues(c.Carrier).Set(v)
}

// CarrierHealth reports what this node believes of the carrier named name:
// up, since when and why. ok is false for a carrier it does not track.
func (p *Proxy) CarrierHealth(name string) (st health.State, ok bool) {
	return p.health.State(name)
}

// healthPolicies derives the health policies of cfg's carriers.
func healthPolicies(cfg *config.Config) map[string]health.Policy {
	pols := make(map[string]health.Policy, len(cfg.Carriers))
	for i := range cfg.Carriers {
		pr := cfg.Carriers[i].Probing()
		pols[cfg.Carriers[i].Name] = health.Policy{Enabled: pr.Interval > 0, DownAfter: pr.DownAfter, UpAfter: pr.UpAfter, Interval: pr.Interval}
	}
	return pols
}

// syncHealth makes the health tracker and cpsguard_carrier_up follow cfg.
func (p *Proxy) syncHealth(cfg *config.Config) {
	p.health.Sync(healthPolicies(cfg))
	for i := range cfg.Carriers {
		v := 0.0
		if p.health.Up(cfg.Carriers[i].Name) {
			v = 1
		}
		p.m.CarrierUp.WithLabelValues(cfg.Carriers[i].Name).Set(v)
	}
}

// runProbes keeps one probe loop per carrier whose probing is on, in step
// with the configuration, until ctx ends.
func (p *Proxy) runProbes(ctx context.Context) {
	defer p.panics.Recover("sip.prober", nil)
	type loop struct {
		spec   probeSpec
		cancel context.CancelFunc
	}
	loops := map[string]loop{}
	var wg sync.WaitGroup
	defer func() {
		for name, l := range loops {
			l.cancel()
			p.probeKicks.Delete(name)
		}
		wg.Wait() // a probe in flight ends with its context
	}()
	var last *config.Config
	t := time.NewTicker(probeSyncEvery)
	defer t.Stop()
	for {
		if cfg := p.cfg(); cfg != nil && cfg != last {
			last = cfg
			p.syncHealth(cfg)
			want := map[string]probeSpec{}
			for i := range cfg.Carriers {
				car := &cfg.Carriers[i]
				if pr := car.Probing(); pr.Interval > 0 {
					want[car.Name] = probeSpec{uri: car.URI, probe: pr}
				}
			}
			for name, l := range loops {
				if spec, ok := want[name]; !ok || spec != l.spec {
					l.cancel()
					delete(loops, name)
					p.probeKicks.Delete(name)
				}
			}
			for name, spec := range want {
				if _, ok := loops[name]; ok {
					continue
				}
				lctx, cancel := context.WithCancel(ctx)
				loops[name] = loop{spec: spec, cancel: cancel}
				kick := make(chan struct{}, 1)
				p.probeKicks.Store(name, kick)
				wg.Go(func() { p.probeLoop(lctx, name, spec, kick) })
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeLoop probes one carrier at once, then every interval and whenever
// kick fires (failed calls ask for a probe to confirm them), one probe at
// a time, until ctx ends. A good probe of a paused carrier ends its pause's
// span (probeAnswered).
func (p *Proxy) probeLoop(ctx context.Context, name string, spec probeSpec, kick <-chan struct{}) {
	defer p.panics.Recover("sip.probe", nil)
	t := time.NewTicker(spec.probe.Interval)
	defer t.Stop()
	for {
		sent := time.Now()
		ok, detail := p.probeOnce(ctx, spec)
		if ctx.Err() != nil {
			return
		}
		if ok {
			if cfg := p.cfg(); cfg != nil {
				if car := cfg.Carrier(name); car != nil {
					p.probeAnswered(ctx, cfg, car, time.Since(sent))
				}
			}
		}
		again := false
		if !ok && strings.HasPrefix(detail, noAnswer) && p.nodeBehind() {
			// Unanswered while this node is behind: the answer may be in
			// its own queue (overload.go). Not evidence against the carrier.
			detail += " (node overloaded: not counted)"
		} else {
			again = p.health.Probed(name, ok, detail)
		}
		result := metrics.ProbeOK
		if !ok {
			result = metrics.ProbeFailed
		}
		p.m.CarrierProbes.WithLabelValues(name, result).Inc()
		if p.log.Enabled(ctx, slog.LevelDebug) {
			p.log.Debug("carrier probed", "carrier", name, "ok", ok, "answer", detail)
		}
		if again {
			// A confirmation under way: the next probe now (a failed
			// probe has already waited its timeout, or had its answer).
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
	}
}

// probeOnce sends one SIP OPTIONS to the carrier and waits up to the
// probe's timeout for a final answer. Any answer other than a 5xx or a 408
// means the carrier is alive (a 404 or 405 comes from a live SIP stack,
// as Kamailio's dispatcher counts it). detail describes the outcome.
func (p *Proxy) probeOnce(ctx context.Context, spec probeSpec) (ok bool, detail string) {
	t, err := parseCarrierURI(spec.uri)
	if err != nil {
		return false, err.Error()
	}
	dest, err := p.carrierAddrPort(t)
	if err != nil {
		return false, "address: " + err.Error()
	}
	var ruri sipmsg.Uri
	if err := sipmsg.ParseUri(spec.uri, &ruri); err != nil {
		return false, err.Error()
	}
	req := p.optionsRequest(ruri, t.transport, dest.Addr())
	lo := addVia(p, req, t.transport, dest.Addr())
	req.SetTransport(t.transport)
	req.SetDestination(dest.String())
	req.Laddr = lo.laddr

	ctx, cancel := context.WithTimeout(ctx, spec.probe.Timeout)
	defer cancel()
	if err := p.tlsHop(ctx, req, []string{strings.Trim(t.host, "[]")}); err != nil {
		return false, "send: " + err.Error()
	}
	tx, err := p.tl.Request(ctx, req)
	if err != nil {
		return false, "send: " + err.Error()
	}
	defer tx.Terminate()
	for {
		select {
		case r := <-tx.Responses():
			if r.IsProvisional() {
				continue
			}
			code := r.StatusCode
			detail := strconv.Itoa(code) + " " + phrase(r.Reason)
			return !(code == sipmsg.StatusRequestTimeout || (code >= 500 && code < 600)), detail
		case <-tx.Done():
			if err := tx.Err(); err != nil {
				return false, noAnswer + ": " + err.Error()
			}
			return false, noAnswer
		case <-ctx.Done():
			return false, noAnswer + " in " + spec.probe.Timeout.String()
		}
	}
}

// optionsRequest builds an out-of-dialog OPTIONS to ruri (its headers and
// maddr removed) from the proxy's own address; the caller adds the Via and
// the addressing.
func (p *Proxy) optionsRequest(ruri sipmsg.Uri, transport string, dest netip.Addr) *sipmsg.Request {
	ruri.Headers = nil
	if ruri.UriParams != nil {
		ruri.UriParams = ruri.UriParams.Clone()
		ruri.UriParams.Remove("maddr")
	}
	req := sipmsg.NewRequest(sipmsg.OPTIONS, ruri)
	lo := p.localFor(transport, dest)
	from := &sipmsg.FromHeader{
		Address: sipmsg.Uri{Scheme: "sip", User: "cpsguard", Host: lo.host, Port: lo.port},
		Params:  sipmsg.NewParams(),
	}
	from.Params.Add("tag", sipmsg.GenerateTagN(16))
	to := &sipmsg.ToHeader{Address: sipmsg.Uri{Scheme: "sip", User: ruri.User, Host: ruri.Host, Port: ruri.Port}, Params: sipmsg.NewParams()}
	callID := sipmsg.CallIDHeader("probe-" + sipmsg.GenerateTagN(24))
	mf := sipmsg.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	req.AppendHeader(from)
	req.AppendHeader(to)
	req.AppendHeader(&callID)
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.OPTIONS})
	req.AppendHeader(sipmsg.NewHeader("Accept", "application/sdp"))
	req.SetBody(nil)
	return req
}

// routeDown reports whether every carrier of route that exists in cfg is
// down on this node (false for an empty route: nothing to skip).
func (p *Proxy) routeDown(cfg *config.Config, route []string) bool {
	known := 0
	for _, name := range route {
		if cfg.Carrier(name) == nil {
			continue
		}
		known++
		if p.health.Up(name) {
			return false
		}
	}
	return known > 0
}

// noAnswer starts the detail of a probe that got no final answer.
const noAnswer = "no answer"

// carrierTimedOut feeds a forwarded call the carrier did not ring in time
// to the health tracker, unless this node is behind (nodeBehind): its own
// lateness (the carrier's answer waiting in the node's queue) is not the
// carrier's.
func (p *Proxy) carrierTimedOut(name, detail string) {
	if p.nodeBehind() {
		return
	}
	p.calledCarrier(name, false, detail)
}

// calledCarrier feeds the outcome of a forwarded call to the health
// tracker (passive detection). When failed calls ask for a confirming
// probe, the carrier's probe loop is woken at once.
func (p *Proxy) calledCarrier(name string, ok bool, detail string) {
	if !p.health.Called(name, ok, detail) {
		return
	}
	if k, found := p.probeKicks.Load(name); found {
		select {
		case k.(chan struct{}) <- struct{}{}:
		default: // a probe is asked for already
		}
	}
}
