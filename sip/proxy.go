package sip

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo"
	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpsguard/cpsguard/admission"
	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/internal/safetext"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/sip/internal/conns"
	"github.com/cpsguard/cpsguard/sip/internal/dialogguard"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/load"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/oc"
	"github.com/cpsguard/cpsguard/sip/internal/refusals"
	"github.com/cpsguard/cpsguard/sip/internal/sipgohook"
	"github.com/cpsguard/cpsguard/sip/internal/tlspolicy"
	"github.com/cpsguard/cpsguard/sip/internal/txorder"
	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// Admitter decides admissions atomically over several rolling-window buckets.
// admission.Store satisfies it.
type Admitter interface {
	Admit(ctx context.Context, member string, buckets []admission.Bucket) (admission.Decision, error)
}

// Pacer waits until a call may be sent to a carrier. *pacing.Pacer
// satisfies it.
type Pacer interface {
	// Acquire takes the carrier's next send slot within c.MaxWait, waits
	// for it and passes this node's send gate for gate; a Ticket with OK
	// false is a full or paused carrier. It returns ctx.Err() when ctx
	// ends first; any other error is the store's. Unless the Ticket is OK,
	// nothing is held. trace (may be nil) is told of each step.
	Acquire(ctx context.Context, c pacing.Carrier, member string, trace pacing.Tracer, gate ...pacing.GateKey) (pacing.Ticket, error)
}

// Carriers is what the proxy needs of its carriers: which to try for a
// route and in what order, whether one is usable now, the rate and slot
// set it is paced by, where its calls go, and what became of each call
// sent to it. *carriers.Set satisfies it.
type Carriers interface {
	// Order returns the carriers a call on the route named route tries,
	// in the order the route's policy gives.
	Order(ctx context.Context, cfg *config.Config, route string) []string
	// Usable reports whether a call may go to car now, or why not (no
	// I/O).
	Usable(cfg *config.Config, car *config.Carrier) carriers.Skip
	// RouteDown reports whether every carrier of the route is down (or
	// out of service): the call is refused before admission.
	RouteDown(cfg *config.Config, route string) bool
	// Pacing is car's slot set at its effective rate, and its send gate
	// key.
	Pacing(cfg *config.Config, car *config.Carrier) (pacing.Carrier, pacing.GateKey)
	// Report takes what became of one call attempt to car.
	Report(cfg *config.Config, car *config.Carrier, o carriers.Outcome)
	// Addr returns where a request to a carrier at t goes (an address
	// prefer accepts first); Known whether a is an address a carrier's
	// host name resolved to, ResolvesTo whether host resolved to a;
	// Resolved lists the names as last resolved, Resolve resolves them
	// now.
	Addr(ctx context.Context, t policy.Target, prefer func(netip.Addr) bool) (netip.AddrPort, error)
	Known(a netip.Addr) bool
	ResolvesTo(host string, a netip.Addr) bool
	Resolved() []carriers.Name
	Resolve(ctx context.Context) []error
	// Run keeps the carriers fresh (probes sent through prober, pauses,
	// rates, names) until ctx ends.
	Run(ctx context.Context, prober carriers.Prober)
}

var _ Carriers = (*carriers.Set)(nil)

var _ Pacer = (*pacing.Pacer)(nil)

// Options configure a Proxy. Config, Admission and Pacer are required.
type Options struct {
	// Config returns the current configuration snapshot. The proxy reads it
	// once per call, so a reload applies to the next call.
	Config func() *config.Config
	// Admission is the rolling-window store (peer and customer buckets).
	Admission Admitter
	// Pacer paces forwarded calls per carrier.
	Pacer Pacer
	// Carriers decides which carriers a call tries and keeps what the
	// node knows of them (a *carriers.Set, shared with the operations
	// API); Serve runs it. nil builds a Set on Pacer (which must then be
	// a carriers.Pacer too, as *pacing.Pacer is), the limit overrides,
	// the metrics and the logger: one node, nothing shared.
	Carriers Carriers
	// Metrics receives every counter; nil builds a private, unexported set.
	Metrics *metrics.Metrics
	// Logger receives the proxy's and sipgo's logs; nil means slog.Default().
	Logger *slog.Logger
	// Calls holds the max_calls places (a *callplaces.Tracker whose Run the
	// caller runs); nil builds a Tracker on an in-process store, run by
	// Serve (one node).
	Calls CallPlaces
	// Overrides are the pool's live limit overrides (limits.Overrides
	// satisfies it); nil: the configured limits only.
	Overrides Overrides
	// DialogEnds shares the ends of dialogs with the pool's other nodes
	// (a *calls.RedisEnded); nil: each node knows the ends it saw.
	DialogEnds DialogEnds
	// Records takes a record of every call that reached a decision (a
	// *records.Writer); nil: no records.
	Records Recorder
	// Resolver looks carriers' host names up (SRV, A, AAAA) for the Set
	// New builds when Carriers is nil; nil: net.DefaultResolver.
	Resolver *net.Resolver
	// Usable reports whether the store can decide calls now (false while
	// Redis is down under store.on_error: reject); out-of-dialog OPTIONS get
	// 503 then, so upstream dispatchers route around the node. nil: always.
	Usable func() bool
	// OpaqueTokens reports whether every node of the pool reads dialog
	// tokens and stateless branches in opaque text (store.Stores does,
	// from the heartbeat); while one does not, the proxy writes them in
	// base64url, which releases before read. nil: always (one node).
	OpaqueTokens func() bool
}

// MaxMessageSize is the largest SIP message the proxy parses. Larger
// messages are dropped (UDP) or close the connection (TCP) and are counted
// in cpsguard_sip_errors_total{reason="oversized"}.
const MaxMessageSize = 16 * 1024

// forwardGrowth bounds what the proxy adds to a message it forwards: its
// Via, two Record-Route entries with the dialog token, a transport
// parameter (TestLargestInviteIsForwarded measures it). A message a
// sender crafted to grow more when sipgo writes it again (compact header
// names, comma lists split into lines) can still go past it and fail to
// leave: its sender's own call, answered 503 (TestUnsendableByeKeepsPlaces).
const forwardGrowth = 2048

func init() {
	// sipgo refuses to send a UDP message longer than UDPMTUSize-200 bytes
	// (1300 by default), so an INVITE with a large SDP could not be
	// forwarded. SIP over UDP may exceed the path MTU (RFC 3261 18.1.1
	// prefers TCP, but a carrier's URI decides the transport here): allow
	// what the proxy accepts. This is process-wide; cpsguard is the only SIP
	// stack user of its process.
	// A forwarded message is the received one and the proxy's Via and
	// Record-Route entries (forwardGrowth), so an INVITE of MaxMessageSize
	// that the proxy admitted can still leave (h67: one of 16,200 bytes
	// was admitted, took its slots and failed at every carrier).
	if sipmsg.UDPMTUSize < MaxMessageSize+forwardGrowth+200 {
		sipmsg.UDPMTUSize = MaxMessageSize + forwardGrowth + 200
	}
	// sipgo answers an INVITE 100 Trying by itself when its handler has not
	// answered within Timer_1xx (200 ms). The proxy sends exactly one 100
	// per INVITE transaction of its own (the screen's, or the handler's,
	// or the in-dialog relay's): a second one is a retransmission to a
	// caller that matches responses to transactions (SIPp's response_txn),
	// and a call waiting for its pacing slot answers nothing for longer
	// than 200 ms. So sipgo's is pushed beyond any transaction's life
	// (the timer is stopped at the transaction's first answer or end).
	sipmsg.Timer_1xx = noAutoTrying
	// sipgo keeps an answered call's server and client INVITE
	// transactions 64·T1 = 32 s after the 2xx (RFC 6026's Accepted state),
	// each with the call's parsed messages and state: ~13 KB a call, a
	// live heap of ~440 MB at 1,200 calls/s (BENCHMARKS.md, session 12),
	// growing with the rate. What they are kept for: the carrier's 2xx
	// retransmissions, sent at 0.5, 1.5, 3.5, 7.5 s while no ACK reached
	// it, are relayed to the caller, whose ACK answers each; copies of
	// the caller's INVITE are absorbed. answeredLinger (8 s) keeps the
	// first four retransmissions, enough for a lost ACK to be sent again
	// four times; the invite table's tombstone (invites' keptTTL, 32 s) absorbs the
	// INVITE's copies after it (screen.go); a later 2xx is a stray and
	// dropped (onStrayResponse), as is a forking carrier's second answer
	// coming that late (its UAS ends it without an ACK). Kamailio's tm
	// keeps a transaction 5 s after its final reply (wt_timer). Timer D
	// (a failed attempt's client transaction, absorbing the carrier's
	// copies of its final answer) is cut likewise. An answered call ends
	// both transactions at its caller's ACK instead (any transport), and
	// answers the rest of the linger's retransmissions with that ACK
	// (acked.go).
	sipmsg.Timer_L = answeredLinger
	sipmsg.Timer_M = answeredLinger
	sipmsg.Timer_D = answeredLinger
}

// answeredLinger is how long an answered call's INVITE transactions last
// after its 2xx (sipgo's Timers L and M, RFC 6026's 64·T1 = 32 s), and a
// failed attempt's client transaction after its final answer (Timer D,
// 32 s over UDP): set in init.
const answeredLinger = 8 * time.Second

// noAutoTrying is sipgo's Timer_1xx as the proxy sets it: never reached.
const noAutoTrying = 24 * time.Hour

// udpReadBuffer is the socket receive buffer asked for UDP listeners.
const udpReadBuffer = 4 << 20

// Timers of the call path (a carrier's own setup_timeout decides how long
// it has to ring, config.Carrier.Setup).
var (
	// connectTimeout bounds opening a TCP connection to a next hop.
	connectTimeout = 4 * time.Second
	// ringTimeout bounds a forwarded INVITE that got a provisional response
	// but no final one (RFC 3261 Timer C is > 3 min).
	ringTimeout = 3 * time.Minute
	// cancelTimeout is how long a CANCELled INVITE waits for the carrier's
	// final response before the proxy gives up on it.
	cancelTimeout = 5 * time.Second
	// storeBudget is the least safety bound on one admission store call
	// (the store's own store.redis.timeout is much shorter).
	storeBudget = time.Second
	// shutdownGrace bounds how long Serve waits for calls to finish after
	// its context is cancelled when the configuration has no
	// sip.drain_grace (a hand-built one; a loaded one always has it).
	shutdownGrace = 5 * time.Second
)

// Causes of a call context's cancellation.
var (
	errCallCanceled  = errors.New("sip: call canceled by the caller")
	errTxTerminated  = errors.New("sip: server transaction terminated")
	errProxyShutdown = errors.New("sip: proxy shutting down")
)

// listener is one bound SIP socket.
type listener struct {
	network string // "udp", "tcp" or "tls"
	addr    netip.AddrPort
	udp     *net.UDPConn
	tcp     *net.TCPListener // tcp and tls
	// tls is a tls listener's server configuration (p.tls.Server).
	tls *tls.Config
	// dual: an IPv6 wildcard socket that takes IPv4 too (bound without
	// IPV6_V6ONLY: no IPv4 listener of its transport is beside it).
	dual bool
}

// serves reports whether l reaches the address family v6 (else IPv4).
func (l listener) serves(v6 bool) bool {
	return l.dual || l.addr.Addr().Is6() == v6
}

// localKey names the listener that names the proxy: a transport ("udp",
// "tcp", "tls") and an address family.
type localKey struct {
	network string
	v6      bool
}

// local is how the proxy names itself on one transport towards one
// address family (Via, Record-Route).
type local struct {
	host string
	port int
	// laddr is the UDP listener's local address, used as the source of
	// outgoing UDP requests so carriers see the proxy's SIP port.
	laddr sipmsg.Addr
	// exact: a listener of this transport and family; otherwise host and
	// port are borrowed from another listener and no socket of the
	// proxy's sends.
	exact bool
}

// Proxy is the SIP front end: it identifies, admits, routes, paces and
// forwards calls. Build it with New and run it with Serve.
type Proxy struct {
	cfg   func() *config.Config
	adm   Admitter
	pacer Pacer
	calls CallPlaces
	// ownCalls is the Tracker New built when Options.Calls was nil; Serve
	// runs its refresher.
	ownCalls *callplaces.Tracker
	m        *metrics.Metrics
	// unrouteLog stops sipgo's package logger (sipgoDefault) from routing
	// to this proxy's handler; Serve calls it when it returns.
	unrouteLog func()
	log        *slog.Logger

	ua  *sipgo.UserAgent
	srv *sipgo.Server
	tl  *sipmsg.TransactionLayer
	tp  *sipmsg.TransportLayer

	ready   chan struct{}
	serving atomic.Bool

	// Set once in Serve before ready is closed; read-only afterwards.
	listeners []listener
	// locals name the proxy per transport and family; firstLocal per
	// transport, by its first listener (a destination of unknown family).
	locals     map[localKey]local
	firstLocal map[string]local
	advHost    string
	advPort    int
	// ifAddrs are the machine's interface addresses, collected when a
	// listener is bound to an unspecified address (0.0.0.0, ::): such a
	// listener is reached on any of them, and on nothing else.
	ifAddrs []netip.Addr

	// base is the parent of every call context; cancelled on shutdown.
	base       context.Context
	baseCancel context.CancelCauseFunc
	draining   atomic.Bool
	active     atomic.Int64
	// inflight counts the new calls being decided (overload.go).
	inflight load.Inflight
	// behind is when the node was last seen behind reading its own
	// queues (overload.go).
	behind load.Behind
	// ocMeters are the reductions asked of overload-control clients, per
	// peer (oc.go).
	ocMeters oc.Meters
	// rawSheds counts the calls the UDP workers shed from raw bytes
	// (rawshed.go; tests).
	rawSheds atomic.Int64
	// parser reads the UDP workers' datagrams (and shedParsed's) into
	// sipgo's messages as sipgo's parser would, with fewer allocations
	// (wire.Parser); its sipgo parser reads the streams sipgo's
	// transports read.
	parser *wire.Parser
	// parsed bounds shedParsed's parsing (rawshed.go).
	parsed parseBudget
	// txOrder hands what the screen let pass to sipgo's transaction
	// layer (its Next: the handlers the screen guards, sipgohook.Screen),
	// the responses to the node's own client transactions to them in
	// order (package sip/internal/txorder); the UDP workers call it once
	// the screen let a message pass (ingress.go).
	txOrder txorder.Table
	// ingress reads the UDP listeners (ingress.go); set in Serve.
	ingress *ingress.Ingress
	// streams applies the stream bounds to the TCP and TLS connections
	// the node dials, and knows those it accepted (package
	// sip/internal/conns).
	streams *conns.StreamScans
	// udpConns are the UDP listeners as sipgo's pool holds them; set in
	// Serve before ready is closed, read-only afterwards.
	udpConns map[*net.UDPConn]*sipmsg.UDPConnection
	// sources are the known parties' UDP source addresses registered in
	// sipgo's pool (ingress.go).
	sources *sources

	// keys mint and check the dialog tokens of Record-Route and Route.
	keys *dialogKeys
	// invites are the INVITEs in progress, as a CANCEL finds them.
	invites *invites.Table
	// acked keeps what answered calls whose transactions ended at their
	// caller's ACK need for the rest of their linger (acked.go).
	acked ackedTable
	// ackOrder holds a dialog's requests to a stream leg behind the ACK
	// just ahead of them (ackorder.go).
	ackOrder ackOrder
	// refused are the proxy's own final answers to INVITEs it never
	// forwarded, for their copies (refused.go).
	refused *refusals.Table
	// byes are the BYEs relayed statelessly waiting for their answer
	// (ends.go).
	byes pendingByes
	// dialogs are the ended dialogs and the per-dialog rates (dialogs.go);
	// dialogEnds is Options.DialogEnds.
	dialogs    *dialogguard.Guard
	dialogEnds DialogEnds
	// onWriteBlocked is writeBlocked, made once: a method value made per
	// INVITE would be one more allocation per call.
	onWriteBlocked func(remote string)
	// carriers is Options.Carriers (or the Set New built).
	carriers Carriers
	// tls is SIP over TLS: sip.tls's files, the listeners' and dialled
	// connections' configurations, the name check of each TLS hop
	// (package sip/internal/tlspolicy).
	tls *tlspolicy.Policy
	// lastGaps are the carrier host names last logged by warnFamilyGaps.
	lastGaps []string
	// panics logs and counts panics recovered in handlers and goroutines.
	panics *panics.Reporter
	// records is Options.Records (may be nil).
	records Recorder
	// storeUsable is Options.Usable.
	storeUsable func() bool
	// overrides is Options.Overrides (may be nil); read through limitsOf.
	overrides Overrides
	// events writes the call event lines (log.events).
	events *eventLog
	// prioLog writes the priority call lines (priority.go).
	prioLog *eventLog
	// noViaLog rate-limits the log lines of responses not relayed for
	// want of a Via (relay.go).
	noViaLog logGate
}

// New builds a Proxy. It does not open sockets; Serve does.
func New(opts Options) (*Proxy, error) {
	if opts.Config == nil {
		return nil, errors.New("sip: Options.Config is required")
	}
	if opts.Admission == nil {
		return nil, errors.New("sip: Options.Admission is required")
	}
	if opts.Pacer == nil {
		return nil, errors.New("sip: Options.Pacer is required")
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Every string the proxy logs may come from a peer or a carrier
	// (Call-IDs, reason phrases, sipgo's errors quoting headers): escaped
	// before the handler sees it.
	opts.Logger = safetext.Logger(opts.Logger)
	p := &Proxy{
		cfg:   opts.Config,
		adm:   opts.Admission,
		pacer: opts.Pacer,
		m:     opts.Metrics,
		log:   opts.Logger.With("component", "sip"),
		ready: make(chan struct{}),

		invites:     invites.New(),
		refused:     refusals.New(refusals.Max, refusals.TTL),
		dialogs:     dialogguard.New(dialogBurst, dialogRate),
		dialogEnds:  opts.DialogEnds,
		carriers:    opts.Carriers,
		storeUsable: opts.Usable,
		overrides:   opts.Overrides,
		calls:       opts.Calls,
		records:     opts.Records,

		ackOrder: ackOrder{Limit: connectTimeout},
	}
	p.onWriteBlocked = p.writeBlocked
	if p.calls == nil {
		p.ownCalls = callplaces.NewTracker(callplaces.NewLocalStore(nil), callplaces.TrackerOptions{Logger: p.log})
		p.calls = p.ownCalls
	}
	p.calls.SetOnEnd(p.callEnded)
	p.panics = &panics.Reporter{Log: p.log, Count: p.m.Panics}
	p.tls = tlspolicy.New(tlspolicy.Options{
		Config: p.cfg,
		Logger: p.log,
		// p.tp, p.listeners and p.carriers are read when called: set
		// below and in Serve.
		Conn: func(ctx context.Context, req *sipmsg.Request) (sipmsg.Connection, error) {
			return p.tp.ClientRequestConnection(ctx, req)
		},
		TLSListeners: func(yield func(netip.AddrPort) bool) {
			for _, l := range p.listeners {
				if l.network == "tls" && !yield(l.addr) {
					return
				}
			}
		},
		CarrierHosts: func(cfg *config.Config) iter.Seq[string] {
			return func(yield func(string) bool) {
				for _, c := range carrierTargets(cfg) {
					if c.Err == nil && c.Target.Transport == "TLS" && !yield(c.Target.Host) {
						return
					}
				}
			}
		},
		ResolvesTo: func(host string, a netip.Addr) bool { return p.carriers.ResolvesTo(host, a) },
		NameFailed: p.m.SIPErrors.WithLabelValues("tls_name").Inc,
	})
	p.events = &eventLog{log: opts.Logger.With("component", "events")}
	p.prioLog = &eventLog{log: opts.Logger.With("component", "priority")}
	if p.carriers == nil {
		cp, ok := opts.Pacer.(carriers.Pacer)
		if !ok {
			return nil, errors.New("sip: Options.Carriers is required unless Options.Pacer is a carriers.Pacer")
		}
		set, err := carriers.New(carriers.Options{Config: opts.Config, Pacer: cp, Overrides: opts.Overrides,
			Metrics: opts.Metrics, Logger: opts.Logger, Resolver: opts.Resolver})
		if err != nil {
			return nil, fmt.Errorf("sip: %w", err)
		}
		p.carriers = set
	}
	p.base, p.baseCancel = context.WithCancelCause(context.Background())
	keys, err := newDialogKeys(opts.Config(), p.log)
	if err != nil {
		return nil, fmt.Errorf("sip: dialog token key: %w", err)
	}
	keys.opaque = opts.OpaqueTokens
	p.keys = keys

	sipLog := slog.New(&sipgoHandler{inner: opts.Logger.Handler(), errs: p.m.SIPErrors}).With("component", "sipgo")
	p.unrouteLog = sipgoDefault.route(sipLog.Handler())
	p.parser = wire.NewParser(MaxMessageSize)
	idle := tcpLimitsOf(opts.Config()).Idle
	p.streams = conns.NewStreamScans(ingress.DefaultBounds, idle)
	ua, err := sipgo.NewUA(
		sipgo.WithUserAgent("cpsguard"),
		sipgo.WithUserAgentParser(p.parser.Sipgo()),
		sipgo.WithUserAgenTLSConfig(p.tls.Client()),
		sipgo.WithUserAgentTransactionLayerOptions(
			sipmsg.WithTransactionLayerLogger(sipLog),
			sipmsg.WithTransactionLayerUnhandledResponseHandler(p.onStrayResponse),
		),
		sipgo.WithUserAgentTransportLayerOptions(
			sipmsg.WithTransportLayerLogger(sipLog),
			sipmsg.WithTransportLayerReadFilter(p.readFilter),
			// After the read filter: the transports copy it when set.
			sipmsg.WithTransportLayerTransports(sipmsg.TransportsConfig{
				// A write that cannot finish within the idle timeout
				// (a party that does not read) fails, and on an accepted
				// connection closes it (conns, scanConn.Write): it ran in the
				// connection's reader, or in a call's handler.
				TCP: &sipmsg.TransportTCP{ReadTimeout: idle, WriteTimeout: idle},
				TLS: &sipmsg.TransportTLS{TransportTCP: &sipmsg.TransportTCP{ReadTimeout: idle, WriteTimeout: idle}},
			}),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("sip: create user agent: %w", err)
	}
	srv, err := sipgo.NewServer(ua, sipgo.WithServerLogger(sipLog))
	if err != nil {
		_ = ua.Close()
		return nil, fmt.Errorf("sip: create server: %w", err)
	}
	p.ua, p.srv = ua, srv
	p.tl, p.tp = ua.TransactionLayer(), ua.TransportLayer()
	txLayer, err := sipgohook.Screen(p.tp, p.screen, p.txOrder.Handle)
	if err != nil {
		_ = ua.Close()
		return nil, err
	}
	p.txOrder.Next = txLayer
	p.sources = newSources(p.tp.Pool("udp"))
	if err := sipgohook.CheckClientTxConn(); err != nil {
		_ = ua.Close()
		return nil, err
	}
	if err := sipgohook.CheckTimers(); err != nil {
		_ = ua.Close()
		return nil, err
	}

	srv.OnInvite(p.guarded("sip.invite", p.onInvite))
	srv.OnAck(p.guarded("sip.ack", p.onAck))
	srv.OnCancel(p.guarded("sip.cancel", p.onCancel))
	srv.OnNoRoute(p.guarded("sip.other", p.onOther))
	return p, nil
}

// Draining reports whether the proxy has begun to drain (Serve's context
// was cancelled): new initial INVITEs get 503 from then on, so readiness
// probes should fail at once.
func (p *Proxy) Draining() bool { return p.draining.Load() }

// Ready is closed once every listener of Serve is bound.
func (p *Proxy) Ready() <-chan struct{} { return p.ready }

// Addrs returns the bound listen addresses as "udp://ip:port",
// "tcp://ip:port" and "tls://ip:port" (useful with port 0). Valid after
// Ready is closed.
func (p *Proxy) Addrs() []string {
	select {
	case <-p.ready:
	default:
		return nil
	}
	out := make([]string, 0, len(p.listeners))
	for _, l := range p.listeners {
		out = append(out, l.network+"://"+l.addr.String())
	}
	return out
}

// Serve listens on every sip.listen URL of the current configuration (UDP,
// TCP and TLS in one process) and handles SIP until ctx is cancelled. On
// cancellation it drains: new initial INVITEs get 503, calls in progress
// (waiting for a slot or forwarded) have sip.drain_grace of the
// configuration current then (5 s by default) to finish, then the rest are
// cancelled (503 upstream, CANCEL downstream); then it closes the sockets
// and returns nil. It returns an error when a listener cannot be
// bound. Serve may be called once.
func (p *Proxy) Serve(ctx context.Context) error {
	if !p.serving.CompareAndSwap(false, true) {
		return errors.New("sip: Serve called twice")
	}
	defer p.unrouteLog()
	cfg := p.cfg()
	if cfg == nil {
		return errors.New("sip: no configuration")
	}
	if err := p.listen(cfg); err != nil {
		return err
	}
	g, err := p.newIngress()
	if err != nil {
		p.closeListeners()
		return err
	}
	p.ingress = g
	p.udpConns = make(map[*net.UDPConn]*sipmsg.UDPConnection)
	own := make(map[netip.AddrPort]bool)
	pool := p.tp.Pool("udp")
	for _, l := range p.listeners {
		if l.udp != nil {
			c := udpConnection(l.udp)
			p.udpConns[l.udp] = c
			if la, ok := l.udp.LocalAddr().(*net.UDPAddr); ok {
				ap := la.AddrPort()
				own[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
			}
			// Requests the proxy sends from this listener (Laddr set) find
			// it here.
			pool.Add(c.PacketAddr, c)
		}
	}
	p.sources.own = own // before any listener is read
	for _, err := range p.carriers.Resolve(ctx) {
		p.log.Warn("carrier host name does not resolve; calls skip that carrier until it does", "error", err)
	}
	p.warnFamilyGaps()
	if p.ownCalls != nil {
		go p.ownCalls.Run(p.base)
	}
	close(p.ready)

	// The background loops end, and are waited for, before the SIP stack
	// closes: a probe against a closed stack would fail and could report
	// a carrier down on the way out.
	bg, bgCancel := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	stopBackground := func() { bgCancel(); bgWG.Wait() }
	defer stopBackground()
	runCarriers := func(ctx context.Context) { p.carriers.Run(ctx, prober{p}) }
	for _, run := range []func(context.Context){runCarriers, p.runFamilyGaps, p.sweepInvites, p.runEventFlush, p.runSources, p.runDialogs} {
		bgWG.Go(func() { run(bg) })
	}

	var wg sync.WaitGroup
	errc := make(chan error, len(p.listeners))
	// One bucket of strangers' TLS handshakes for every tls:// listener.
	strangerHandshakes := &conns.HandshakeBucket{}
	for _, l := range p.listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if l.udp != nil {
				err = p.ingress.Read(l.udp)
			} else {
				count := func(reason string) { p.m.SIPErrors.WithLabelValues(reason).Inc() }
				var handshakes *conns.HandshakeBucket
				if l.tls != nil {
					handshakes = strangerHandshakes
				}
				var ln net.Listener = conns.NewGuardedListener(l.tcp,
					func() conns.Limits { return tcpLimitsOf(p.cfg()) },
					p.admitTCP, count, handshakes)
				if l.tls != nil {
					// The handshake runs in sipgo's reader of the
					// connection, bounded by the idle timeout; the stream
					// bounds apply to the plaintext, above TLS.
					ln = tls.NewListener(ln, l.tls)
				}
				ln = &conns.ScanListener{Listener: ln, Bounds: ingress.DefaultBounds, Count: count, Scans: p.streams,
					Idle: func() time.Duration { return tcpLimitsOf(p.cfg()).Idle }}
				if l.tls != nil {
					err = p.srv.ServeTLS(ln)
				} else {
					err = p.srv.ServeTCP(ln)
				}
			}
			if err != nil && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("sip: serve %s://%s: %w", l.network, l.addr, err)
			}
		}()
	}
	p.log.Info("sip listening", "addrs", strings.Join(p.Addrs(), ","))
	if cfg.SIP.DialogSecret == "" && cfg.Store.Redis == nil {
		// With store.redis the configuration's warnings say it, for the
		// pool (config.Warnings): once is enough.
		p.log.Warn("sip.dialog_secret is not set: dialog tokens use a random key of this process, " +
			"so in-dialog requests (BYE, re-INVITE, …) of calls set up before a restart " +
			"will be refused with 403 until sip.dialog_secret is set")
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}

	// Drain: new INVITEs get 503, calls in progress (queued or forwarded)
	// may finish within the grace; then the rest are cancelled (503 to the
	// caller, CANCEL to the carrier) and given a moment to say so before
	// the sockets close.
	p.draining.Store(true)
	wait := shutdownGrace
	if c := p.cfg(); c != nil && c.SIP.DrainGrace > 0 {
		wait = c.SIP.DrainGrace
	}
	grace, cancel := context.WithTimeout(context.Background(), wait)
	_ = p.waitIdle(grace)
	cancel()
	p.baseCancel(errProxyShutdown)
	last, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = p.waitIdle(last)
	cancel()
	// The answered calls go on between their ends, but no longer through
	// this node: their records are written (end_reason shutdown) and they
	// leave the pool's list.
	end, cancel := context.WithTimeout(context.Background(), time.Second)
	p.calls.Shutdown(end)
	cancel()
	stopBackground()
	p.closeListeners()
	wg.Wait()
	p.ingress.Close()
	_ = p.ua.Close()
	return serveErr
}

// sweepInvites removes INVITE entries no handler claimed and tombstones,
// every second, until ctx ends.
func (p *Proxy) sweepInvites(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.sweepOnce(now)
		}
	}
}

// sweepOnce is one sweep, its panic recovered there: a sweeper that died
// would never give orphaned inflight units back, and the node would end
// up shedding every call.
func (p *Proxy) sweepOnce(now time.Time) {
	defer p.panics.Recover("sip.sweep", nil)
	p.invites.Sweep(now)
	p.refused.Sweep(now)
	p.sweepByes(now)
	p.dialogs.Sweep(now)
}

// waitIdle polls until no initial INVITE is being handled or ctx ends.
func (p *Proxy) waitIdle(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for p.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// listenSpec is one sip.listen URL, resolved.
type listenSpec struct {
	raw     string
	network string // "udp", "tcp" or "tls"
	ip      net.IP
	port    int
	zone    string
}

// parseListen resolves one sip.listen URL.
func parseListen(raw string) (listenSpec, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return listenSpec{}, fmt.Errorf("sip: listen %q: want udp://host:port, tcp://host:port or tls://host:port", raw)
	}
	network := strings.ToLower(u.Scheme)
	switch network {
	case "udp":
		a, err := net.ResolveUDPAddr("udp", u.Host)
		if err != nil {
			return listenSpec{}, fmt.Errorf("sip: listen %q: %w", raw, err)
		}
		return listenSpec{raw: raw, network: network, ip: a.IP, port: a.Port, zone: a.Zone}, nil
	case "tcp", "tls":
		a, err := net.ResolveTCPAddr("tcp", u.Host)
		if err != nil {
			return listenSpec{}, fmt.Errorf("sip: listen %q: %w", raw, err)
		}
		return listenSpec{raw: raw, network: network, ip: a.IP, port: a.Port, zone: a.Zone}, nil
	}
	return listenSpec{}, fmt.Errorf("sip: listen %q: unsupported scheme %q (udp, tcp or tls)", raw, u.Scheme)
}

// is4 reports an IPv4 listen address (nil, from an empty host, is
// IPv4's 0.0.0.0 too: Go would bind it dual-stack).
func (s listenSpec) is4() bool { return s.ip == nil || s.ip.To4() != nil }

// socketNetwork is the network s binds with. An IPv4 address binds an
// IPv4 socket: Go opens 0.0.0.0 as a dual-stack IPv6 socket otherwise,
// which takes the port from a [::] listener beside it. An IPv6 address
// binds an IPv6-only socket when an IPv4 listener of its transport is
// listed too (each family then has its own socket); alone, an IPv6
// wildcard ([::]) stays dual-stack and takes IPv4 as well.
func (s listenSpec) socketNetwork(v4Sibling bool) (network string, dual bool) {
	base := "udp"
	if s.network != "udp" {
		base = "tcp"
	}
	switch {
	case s.is4():
		return base + "4", false
	case v4Sibling:
		return base + "6", false
	}
	return base, s.ip.IsUnspecified()
}

// listen binds every listen URL and computes how the proxy names itself.
func (p *Proxy) listen(cfg *config.Config) error {
	if len(cfg.SIP.Listen) == 0 {
		return errors.New("sip: sip.listen is empty")
	}
	closeAll := func() {
		p.closeListeners()
		p.listeners = nil
	}
	specs := make([]listenSpec, 0, len(cfg.SIP.Listen))
	v4 := map[string]bool{}
	for _, raw := range cfg.SIP.Listen {
		s, err := parseListen(raw)
		if err != nil {
			return err
		}
		specs = append(specs, s)
		if s.is4() {
			v4[s.network] = true
		}
	}
	var tlsConf *tls.Config
	for _, s := range specs {
		network, dual := s.socketNetwork(v4[s.network])
		switch s.network {
		case "udp":
			c, err := net.ListenUDP(network, &net.UDPAddr{IP: s.ip, Port: s.port, Zone: s.zone})
			if err != nil {
				closeAll()
				return fmt.Errorf("sip: listen %q: %w", s.raw, err)
			}
			// Bursts of datagrams must not be dropped by a small default
			// buffer (the kernel caps this at net.core.rmem_max).
			_ = c.SetReadBuffer(udpReadBuffer)
			ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
			p.listeners = append(p.listeners, listener{network: "udp", addr: unmap(ap), udp: c, dual: dual})
		default:
			if s.network == "tls" && tlsConf == nil {
				c, err := p.tls.Server(cfg)
				if err != nil {
					closeAll()
					return fmt.Errorf("sip: listen %q: %w", s.raw, err)
				}
				tlsConf = c
			}
			l, err := net.ListenTCP(network, &net.TCPAddr{IP: s.ip, Port: s.port, Zone: s.zone})
			if err != nil {
				closeAll()
				return fmt.Errorf("sip: listen %q: %w", s.raw, err)
			}
			ap := l.Addr().(*net.TCPAddr).AddrPort()
			p.listeners = append(p.listeners, listener{network: s.network, addr: unmap(ap), tcp: l, dual: dual, tls: tlsConf})
		}
	}

	if adv := cfg.SIP.Advertise; adv != "" {
		if h, port, err := net.SplitHostPort(adv); err == nil {
			p.advHost = h
			p.advPort, _ = strconv.Atoi(port)
		} else {
			p.advHost = strings.Trim(adv, "[]")
		}
	}
	for _, l := range p.listeners {
		if l.addr.Addr().IsUnspecified() {
			p.ifAddrs = interfaceAddrs()
			break
		}
	}
	p.locals = make(map[localKey]local, 2*len(transports))
	p.firstLocal = make(map[string]local, len(transports))
	for _, l := range p.listeners {
		for _, v6 := range []bool{false, true} {
			key := localKey{network: l.network, v6: v6}
			if _, ok := p.locals[key]; ok || !l.serves(v6) {
				continue // the first listener of a transport and family names the proxy
			}
			lo := local{host: p.advHost, port: p.advPort, exact: true}
			if lo.host == "" {
				lo.host = hostOf(l.addr.Addr(), v6)
			}
			if lo.port == 0 {
				lo.port = int(l.addr.Port())
			}
			if l.udp != nil {
				la := l.udp.LocalAddr().(*net.UDPAddr)
				lo.laddr = sipmsg.Addr{IP: la.IP, Port: la.Port, Zone: la.Zone}
			}
			p.locals[key] = lo
			if _, ok := p.firstLocal[l.network]; !ok && v6 == !l.addr.Addr().Is4() {
				p.firstLocal[l.network] = lo
			}
		}
	}
	return nil
}

// closeListeners closes every bound socket.
func (p *Proxy) closeListeners() {
	for _, l := range p.listeners {
		if l.udp != nil {
			_ = l.udp.Close()
		} else {
			_ = l.tcp.Close()
		}
	}
}

// hostOf names a listen address for Via and Record-Route in family v6
// (else IPv4); an unspecified address falls back to the host's first
// non-loopback address of that family (global unicast for IPv6), else
// the family's loopback.
func hostOf(a netip.Addr, v6 bool) string {
	if !a.IsUnspecified() {
		return a.String()
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range addrs {
			n, ok := ia.(*net.IPNet)
			if !ok || n.IP.IsLoopback() {
				continue
			}
			if !v6 && n.IP.To4() != nil {
				return n.IP.String()
			}
			if v6 && n.IP.To4() == nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	if v6 {
		return "::1"
	}
	return "127.0.0.1"
}

// interfaceAddrs lists the machine's interface addresses (unmapped, no
// zone).
func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// transports are the proxy's SIP transports, by sip.listen scheme.
var transports = [...]string{"udp", "tcp", "tls"}

// localFor returns how the proxy names itself on transport tp ("UDP",
// "TCP", "TLS") towards to: the first listener of that transport in to's
// address family (so an IPv6 next hop gets the IPv6 socket and address,
// an IPv4 one the IPv4 ones). Without such a listener, a listener of the
// family on another transport lends its address (laddr empty: no socket
// of the proxy's can send there, sipgo opens one), else the transport's
// first listener; to invalid (unknown) picks the transport's first
// listener.
func (p *Proxy) localFor(tp string, to netip.Addr) local {
	n := msgpart.LowerTransport(tp)
	if !to.IsValid() {
		if lo, ok := p.firstLocal[n]; ok {
			return lo
		}
	} else {
		v6 := !to.Unmap().Is4()
		if lo, ok := p.locals[localKey{network: n, v6: v6}]; ok {
			return lo
		}
		for _, m := range transports {
			if lo, ok := p.locals[localKey{network: m, v6: v6}]; ok {
				lo.laddr, lo.exact = sipmsg.Addr{}, false
				return lo
			}
		}
	}
	for _, m := range append([]string{n}, transports[:]...) {
		if lo, ok := p.firstLocal[m]; ok {
			lo.laddr, lo.exact = sipmsg.Addr{}, false
			return lo
		}
	}
	return local{host: "127.0.0.1", port: 5060}
}

// isMe reports whether a SIP URI (from a Route header) points at this proxy.
func (p *Proxy) isMe(u *sipmsg.Uri) bool {
	host := strings.Trim(u.Host, "[]")
	port := u.Port
	if port == 0 {
		// The transport's default port: 5061 for TLS (a sips: URI or
		// ;transport=tls), else 5060.
		port = sipmsg.DefaultPort(targetOf(u, "UDP").transport)
	}
	if p.advHost != "" && strings.EqualFold(host, p.advHost) {
		if p.advPort != 0 {
			return port == p.advPort
		}
		return p.listensOn(port)
	}
	if !p.listensOn(port) && port != p.advPort {
		return false
	}
	for _, lo := range p.locals {
		if strings.EqualFold(host, lo.host) {
			return true
		}
	}
	ha, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ha = ha.Unmap().WithZone("")
	for _, l := range p.listeners {
		if l.addr.Addr() == ha {
			return true
		}
		// A listener on 0.0.0.0 or :: is reached on the machine's own
		// addresses only: another host on the same port (a carrier's SBC
		// in the route set) is not this proxy.
		if l.addr.Addr().IsUnspecified() && slices.Contains(p.ifAddrs, ha) {
			return true
		}
	}
	return false
}

func (p *Proxy) listensOn(port int) bool {
	for _, l := range p.listeners {
		if int(l.addr.Port()) == port {
			return true
		}
	}
	return false
}

// readFilter runs in sipgo's read loop of a UDP socket sipgo opened
// itself (a request sent without a listener of its transport to send it
// from; the listeners are read by the ingress, ingress.go) on each
// datagram before it is parsed: it drops what the ingress would drop
// before any other work (dropEarly, the parameter bounds). On a TCP or
// TLS connection the node dialled it applies the same bounds to the
// stream (conns.StreamScans): an error closes the connection. A
// panic in it drops the read (counted in
// cpsguard_panics_total{where="sip.read_filter"}): it runs in sipgo's read
// loop, where an unrecovered one would end the node.
func (p *Proxy) readFilter(props sipmsg.TransportReadProps, data []byte) (out []byte, err error) {
	defer p.panics.Recover("sip.read_filter", func(error) { out, err = nil, nil })
	if props.Transport == "TCP" || props.Transport == "TLS" {
		return p.streams.Filter(props.LocalAddr, props.RemoteAddr, data, func(reason string) { p.m.SIPErrors.WithLabelValues(reason).Inc() })
	}
	if props.Transport != "UDP" {
		return data, nil
	}
	ua, ok := props.RemoteAddr.(*net.UDPAddr)
	if !ok {
		return data, nil
	}
	if p.dropEarly(data, ua.AddrPort()) {
		return nil, nil
	}
	if _, err := ingress.Scan(data, ingress.DefaultBounds); err != nil {
		reason := ingress.DropParams
		if errors.Is(err, ingress.ErrHeaders) {
			reason = ingress.DropHeaders
		}
		p.m.SIPErrors.WithLabelValues(reason).Inc()
		return nil, nil
	}
	return data, nil
}

// dropEarly reports a UDP datagram from `from` dropped before any other
// work: one over MaxMessageSize (the parser refuses it, as sipgo's; one that
// filled the read buffer was cut short by the socket and cannot be a whole
// SIP message either), a stranger's with unknown_source drop,
// and the ACK of one of the proxy's shed answers from a known source.
func (p *Proxy) dropEarly(data []byte, from netip.AddrPort) bool {
	if len(data) > MaxMessageSize {
		p.m.SIPErrors.WithLabelValues("oversized").Inc()
		return true
	}
	cfg := p.cfg()
	if cfg == nil {
		return false
	}
	ip := from.Addr().WithZone("").Unmap()
	if cfg.SIP.UnknownSource == "drop" && !p.knownSource(cfg, ip) {
		p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
		return true
	}
	return shedAckRaw(data) && p.knownSource(cfg, ip)
}

// tcpLimitsOf returns cfg's TCP bounds (sip.tcp), with the defaults for
// what a hand-built configuration leaves at zero.
func tcpLimitsOf(cfg *config.Config) conns.Limits {
	l := conns.Limits{Idle: conns.DefaultTCPIdle, Max: conns.DefaultTCPMax, PerSource: conns.DefaultTCPPerSource, Parties: 1, Handshakes: conns.DefaultTLSStrangerHandshakes}
	if cfg == nil {
		return l
	}
	l.Parties = max(1, len(cfg.Peers)+len(cfg.Carriers))
	if n := cfg.SIP.TLS.StrangerHandshakesPerSecond; n > 0 {
		l.Handshakes = n
	}
	if t := cfg.SIP.TCP; t.IdleTimeout > 0 {
		l.Idle = t.IdleTimeout
	}
	if t := cfg.SIP.TCP; t.MaxConnections > 0 {
		l.Max = t.MaxConnections
	}
	if t := cfg.SIP.TCP; t.MaxConnectionsPerSource > 0 {
		l.PerSource = t.MaxConnectionsPerSource
	}
	return l
}

// admitTCP reports whether a TCP connection from ip is served (serve): not
// a stranger's when unknown_source is drop (with reject, a stranger's
// requests get their one 403 from the screen); and whether ip is a known
// party's (known: a peer's source or a carrier's address), whose
// connections strangers' cannot crowd out, and which party's (who: a
// carrier by address, a peer by name, as partyOf), whose share of the
// connections it counts against (package sip/internal/conns).
func (p *Proxy) admitTCP(ip netip.Addr) (serve bool, who ingress.Party, known bool) {
	cfg := p.cfg()
	if cfg == nil {
		return true, ingress.Party{}, false
	}
	pt, known := p.partyOf(cfg, ip)
	return known || cfg.SIP.UnknownSource != "drop", ingress.Party{Name: pt.peer, Addr: pt.ip}, known
}

// onStrayResponse handles responses that match no client transaction
// (late retransmissions): a 2xx of a call whose transactions ended at its
// caller's ACK is ACKed again at its carrier (ackedAnswer, acked.go); the
// rest are dropped.
func (p *Proxy) onStrayResponse(res *sipmsg.Response) {
	defer p.panics.Recover("sip.stray_response", nil)
	if p.ackedAnswer(res) {
		return
	}
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		p.log.Debug("stray response dropped", "status", res.StatusCode, "call_id", msgpart.CallID(res))
	}
}
