package siptest

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo"
	sipmsg "github.com/emiago/sipgo/sip"
)

// Answer decides how a Carrier answers one INVITE: the final status code
// (0 = 200) and how long to ring (180) before answering; a negative Ring
// rings until the call is cancelled.
type Answer struct {
	Code int
	Ring time.Duration
	// Reason is the final answer's reason phrase; empty means the usual
	// one for Code.
	Reason string
	// Header adds headers ("Name: value") to the final answer, e.g.
	// "Retry-After: 2".
	Header []string
}

// Carrier is a UAS that answers INVITEs and records their arrival times:
// the kernel's receive time for UDP (SO_TIMESTAMPNS on Linux), the read
// time for TCP, always before parsing.
type Carrier struct {
	// Addr is ip:port the carrier listens on (UDP and TCP, same port).
	Addr string
	// TLSAddr is ip:port of its TLS listener (StartCarrierTLS only).
	TLSAddr string

	answer func(req *sipmsg.Request) Answer
	ua     *sipgo.UserAgent

	mu       sync.Mutex
	arrivals map[string]time.Time // first arrival per Call-ID
	counts   map[string]int       // requests per method (every received one)
	invites  []*sipmsg.Request
	// cancelled counts ringing INVITEs ended by a CANCEL.
	cancelled int
	// options are the arrival times of every OPTIONS, in order.
	options []time.Time
	// silent: every message is dropped unanswered (Silence).
	silent atomic.Bool
}

// Silence makes the carrier a dead one from now on: every message it
// receives is dropped unanswered, as by a host whose SIP stack died
// (arrivals are still recorded: Arrivals, OptionsArrivals).
func (c *Carrier) Silence() { c.silent.Store(true) }

// OptionsArrivals returns the arrival time of every OPTIONS the carrier
// received (answered or not), in order.
func (c *Carrier) OptionsArrivals() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.options...)
}

// Cancelled returns how many ringing INVITEs a CANCEL ended.
func (c *Carrier) Cancelled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled
}

// StartCarrier runs a carrier on ip (e.g. "127.0.0.1"), UDP and TCP on one
// free port. answer may be nil (always 200).
func StartCarrier(t testing.TB, ip string, answer func(req *sipmsg.Request) Answer) *Carrier {
	t.Helper()
	return startCarrier(t, ip, nil, answer)
}

// StartCarrierTLS is StartCarrier that also serves SIP over TLS with conf
// (its certificate; ClientAuth and ClientCAs for mutual TLS) on another
// free port, TLSAddr.
func StartCarrierTLS(t testing.TB, ip string, conf *tls.Config, answer func(req *sipmsg.Request) Answer) *Carrier {
	t.Helper()
	return startCarrier(t, ip, conf, answer)
}

func startCarrier(t testing.TB, ip string, conf *tls.Config, answer func(req *sipmsg.Request) Answer) *Carrier {
	t.Helper()
	c := &Carrier{answer: answer, arrivals: map[string]time.Time{}, counts: map[string]int{}}
	log := slog.New(slog.DiscardHandler)
	ua, err := sipgo.NewUA(
		sipgo.WithUserAgent("carrier"),
		sipgo.WithUserAgentTransactionLayerOptions(sipmsg.WithTransactionLayerLogger(log), sipmsg.WithTransactionLayerUnhandledResponseHandler(func(*sipmsg.Response) {})),
		sipgo.WithUserAgentTransportLayerOptions(
			sipmsg.WithTransportLayerLogger(log),
			sipmsg.WithTransportLayerReadFilter(c.readFilter),
		),
	)
	if err != nil {
		t.Fatalf("carrier ua: %v", err)
	}
	srv, err := sipgo.NewServer(ua, sipgo.WithServerLogger(log))
	if err != nil {
		t.Fatalf("carrier server: %v", err)
	}
	srv.OnInvite(c.onInvite)
	srv.OnAck(func(req *sipmsg.Request, tx sipmsg.ServerTransaction) { c.count("ACK") })
	srv.OnBye(c.ok("BYE"))
	srv.OnOptions(c.ok("OPTIONS"))
	srv.OnCancel(func(req *sipmsg.Request, tx sipmsg.ServerTransaction) { c.count("CANCEL") })

	var udp *net.UDPConn
	var tcp *net.TCPListener
	for attempt := 0; ; attempt++ {
		udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
		if err != nil {
			t.Fatalf("carrier udp: %v", err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip), Port: port})
		if err == nil {
			break
		}
		udp.Close()
		if attempt > 20 {
			t.Fatalf("carrier tcp: %v", err)
		}
	}
	c.Addr = udp.LocalAddr().String()
	c.ua = ua
	go srv.ServeUDP(newStampConn(udp, c.arrived))
	go srv.ServeTCP(tcp)
	var tl net.Listener
	if conf != nil {
		tl, err = tls.Listen("tcp", net.JoinHostPort(ip, "0"), conf)
		if err != nil {
			t.Fatalf("carrier tls: %v", err)
		}
		c.TLSAddr = tl.Addr().String()
		go srv.ServeTLS(tl)
	}
	t.Cleanup(func() {
		udp.Close()
		tcp.Close()
		if tl != nil {
			tl.Close()
		}
		ua.Close()
	})
	return c
}

// readFilter timestamps INVITEs read over TCP (UDP ones are stamped by the
// kernel, see stampConn), and drops everything once the carrier is
// silenced.
func (c *Carrier) readFilter(props sipmsg.TransportReadProps, data []byte) ([]byte, error) {
	if props.Transport != "UDP" {
		c.arrived(data, time.Now())
	}
	if c.silent.Load() {
		return nil, nil
	}
	return data, nil
}

// arrived records the first arrival of an INVITE, and every OPTIONS.
func (c *Carrier) arrived(data []byte, at time.Time) {
	if bytes.HasPrefix(data, []byte("OPTIONS ")) {
		c.mu.Lock()
		c.options = append(c.options, at)
		c.mu.Unlock()
		return
	}
	if !bytes.HasPrefix(data, []byte("INVITE ")) {
		return
	}
	if id := rawCallID(data); id != "" {
		c.mu.Lock()
		if _, seen := c.arrivals[id]; !seen {
			c.arrivals[id] = at
		}
		c.mu.Unlock()
	}
}

// rawCallID finds the Call-ID header in raw message bytes.
func rawCallID(data []byte) string {
	for _, name := range []string{"\nCall-ID:", "\ni:", "\ncall-id:", "\nCall-Id:"} {
		i := bytes.Index(data, []byte(name))
		if i < 0 {
			continue
		}
		rest := data[i+len(name):]
		if j := bytes.IndexByte(rest, '\n'); j >= 0 {
			rest = rest[:j]
		}
		return string(bytes.TrimSpace(rest))
	}
	return ""
}

func (c *Carrier) count(method string) {
	c.mu.Lock()
	c.counts[method]++
	c.mu.Unlock()
}

func (c *Carrier) ok(method string) sipgo.RequestHandler {
	return func(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
		c.count(method)
		_ = tx.Respond(sipmsg.NewResponseFromRequest(req, 200, "OK", nil))
	}
}

func (c *Carrier) onInvite(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	c.count("INVITE")
	c.mu.Lock()
	c.invites = append(c.invites, req)
	c.mu.Unlock()
	a := Answer{Code: 200}
	if c.answer != nil {
		a = c.answer(req)
		if a.Code == 0 {
			a.Code = 200
		}
	}
	_ = tx.Respond(sipmsg.NewResponseFromRequest(req, 100, "Trying", nil))
	if a.Ring != 0 {
		ring := sipmsg.NewResponseFromRequest(req, 180, "Ringing", nil)
		_ = tx.Respond(ring)
		var after <-chan time.Time
		if a.Ring > 0 {
			after = time.After(a.Ring)
		}
		select {
		case <-after:
		case <-tx.Done():
			return
		case <-cancelled(tx):
			c.mu.Lock()
			c.cancelled++
			c.mu.Unlock()
			return // sipgo answered 487
		}
	}
	phrase := a.Reason
	if phrase == "" {
		phrase = reason(a.Code)
	}
	res := sipmsg.NewResponseFromRequest(req, a.Code, phrase, nil)
	for _, h := range a.Header {
		if i := strings.IndexByte(h, ':'); i > 0 {
			res.AppendHeader(sipmsg.NewHeader(h[:i], strings.TrimSpace(h[i+1:])))
		}
	}
	if a.Code >= 200 && a.Code < 300 {
		addr := c.Addr
		if req.Transport() == "TLS" {
			addr = c.TLSAddr
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		contact := &sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "carrier", Host: URIHost(host), Port: p, UriParams: sipmsg.NewParams()}}
		if tp := req.Transport(); tp == "TCP" || tp == "TLS" {
			contact.Address.UriParams.Add("transport", strings.ToLower(tp))
		}
		res.AppendHeader(contact)
	}
	_ = tx.Respond(res)
}

func cancelled(tx sipmsg.ServerTransaction) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	if !tx.OnCancel(func(*sipmsg.Request) { once.Do(func() { close(ch) }) }) {
		once.Do(func() { close(ch) })
	}
	return ch
}

func reason(code int) string {
	switch code {
	case 200:
		return "OK"
	case 408:
		return "Request Timeout"
	case 486:
		return "Busy Here"
	case 503:
		return "Service Unavailable"
	}
	return "Status " + strconv.Itoa(code)
}

// Arrivals returns the first arrival time of every INVITE, sorted.
func (c *Carrier) Arrivals() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.arrivals))
	for _, t := range c.arrivals {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// ArrivalsOf returns the first arrival time of every INVITE whose Call-ID
// starts with prefix, sorted: one caller's calls, when each caller numbers
// its own.
func (c *Carrier) ArrivalsOf(prefix string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for id, t := range c.arrivals {
		if strings.HasPrefix(id, prefix) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// Count returns how many requests of method the carrier handled
// (retransmissions absorbed by transactions are not counted).
func (c *Carrier) Count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[method]
}

// Invites returns the INVITEs the carrier received, in order.
func (c *Carrier) Invites() []*sipmsg.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*sipmsg.Request(nil), c.invites...)
}

// Caller returns a UAC that sends over the carrier's own UDP socket (its
// requests come from c.Addr, as a carrier's in-dialog requests do).
func (c *Carrier) Caller(t testing.TB) *Caller {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if conn, err := c.ua.TransportLayer().GetConnection("udp", c.Addr); err == nil && conn != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("carrier listener %s not ready", c.Addr)
		}
		time.Sleep(time.Millisecond)
	}
	client, err := sipgo.NewClient(c.ua, sipgo.WithClientAddr(c.Addr), sipgo.WithClientConnectionAddr(c.Addr), sipgo.WithClientLogger(log))
	if err != nil {
		t.Fatalf("carrier client: %v", err)
	}
	return &Caller{Addr: c.Addr, ua: c.ua, client: client, transport: "UDP"}
}

// Caller is a UDP UAC bound to one source address (or, StartTLSCaller, a
// UAC over TLS from that address). It answers every BYE it receives 200
// and keeps it (Byes).
type Caller struct {
	Addr   string
	ua     *sipgo.UserAgent
	client *sipgo.Client
	// transport of its requests: "UDP" (StartCaller) or "TLS".
	transport string

	mu   sync.Mutex
	byes []*sipmsg.Request
}

// Byes returns the BYEs the caller received, in order.
func (c *Caller) Byes() []*sipmsg.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*sipmsg.Request(nil), c.byes...)
}

// StartCaller binds a UDP caller on ip (e.g. "127.0.0.2").
func StartCaller(t testing.TB, ip string) *Caller {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ua, err := sipgo.NewUA(
		sipgo.WithUserAgent("caller"),
		sipgo.WithUserAgentTransactionLayerOptions(sipmsg.WithTransactionLayerLogger(log), sipmsg.WithTransactionLayerUnhandledResponseHandler(func(*sipmsg.Response) {})),
		sipgo.WithUserAgentTransportLayerOptions(sipmsg.WithTransportLayerLogger(log)),
	)
	if err != nil {
		t.Fatalf("caller ua: %v", err)
	}
	srv, err := sipgo.NewServer(ua, sipgo.WithServerLogger(log))
	if err != nil {
		t.Fatalf("caller server: %v", err)
	}
	c := &Caller{}
	srv.OnBye(func(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
		c.mu.Lock()
		c.byes = append(c.byes, req)
		c.mu.Unlock()
		_ = tx.Respond(sipmsg.NewResponseFromRequest(req, 200, "OK", nil))
	})
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatalf("caller udp: %v", err)
	}
	addr := udp.LocalAddr().String()
	go srv.ServeUDP(udp)
	// Requests leave through the listener: wait until sipgo pooled it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c, err := ua.TransportLayer().GetConnection("udp", addr); err == nil && c != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("caller listener %s not ready", addr)
		}
		time.Sleep(time.Millisecond)
	}
	client, err := sipgo.NewClient(ua, sipgo.WithClientAddr(addr), sipgo.WithClientConnectionAddr(addr), sipgo.WithClientLogger(log))
	if err != nil {
		t.Fatalf("caller client: %v", err)
	}
	t.Cleanup(func() {
		udp.Close()
		ua.Close()
	})
	c.Addr, c.ua, c.client, c.transport = addr, ua, client, "UDP"
	return c
}

// StartTLSCaller runs a UAC that sends its requests over TLS with conf
// (RootCAs to verify the proxy; Certificates for mutual TLS), from ip and
// an ephemeral port. It answers BYEs (over its connections) 200. Its Addr
// is ip:5061, what its Contact names.
func StartTLSCaller(t testing.TB, ip string, conf *tls.Config) *Caller {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ua, err := sipgo.NewUA(
		sipgo.WithUserAgent("tls-caller"),
		sipgo.WithUserAgenTLSConfig(conf),
		sipgo.WithUserAgentTransactionLayerOptions(sipmsg.WithTransactionLayerLogger(log), sipmsg.WithTransactionLayerUnhandledResponseHandler(func(*sipmsg.Response) {})),
		sipgo.WithUserAgentTransportLayerOptions(sipmsg.WithTransportLayerLogger(log)),
	)
	if err != nil {
		t.Fatalf("tls caller ua: %v", err)
	}
	srv, err := sipgo.NewServer(ua, sipgo.WithServerLogger(log))
	if err != nil {
		t.Fatalf("tls caller server: %v", err)
	}
	srv.OnBye(func(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
		_ = tx.Respond(sipmsg.NewResponseFromRequest(req, 200, "OK", nil))
	})
	client, err := sipgo.NewClient(ua, sipgo.WithClientHostname(ip), sipgo.WithClientConnectionAddr(net.JoinHostPort(ip, "0")), sipgo.WithClientLogger(log))
	if err != nil {
		t.Fatalf("tls caller client: %v", err)
	}
	t.Cleanup(func() { ua.Close() })
	return &Caller{Addr: net.JoinHostPort(ip, "5061"), ua: ua, client: client, transport: "TLS"}
}

// Invite builds an INVITE for user@proxy (proxy is ip:port) with extra
// headers ("Name: value").
func (c *Caller) Invite(proxy string, headers ...string) *sipmsg.Request {
	host, port, _ := net.SplitHostPort(proxy)
	p, _ := strconv.Atoi(port)
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: URIHost(host), Port: p})
	chost, cport, _ := net.SplitHostPort(c.Addr)
	cp, _ := strconv.Atoi(cport)
	contact := &sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: URIHost(chost), Port: cp}}
	if c.transport == "TLS" {
		req.Recipient.UriParams = sipmsg.NewParams()
		req.Recipient.UriParams.Add("transport", "tls")
		contact.Address.UriParams = sipmsg.NewParams()
		contact.Address.UriParams.Add("transport", "tls")
	}
	req.AppendHeader(contact)
	for _, h := range headers {
		if i := bytes.IndexByte([]byte(h), ':'); i > 0 {
			req.AppendHeader(sipmsg.NewHeader(h[:i], string(bytes.TrimSpace([]byte(h[i+1:])))))
		}
	}
	req.SetTransport(c.Transport())
	return req
}

// URIHost is host as a SIP URI holds it (RFC 3261 25.1): an IPv6 address
// in brackets, as sipgo's parser keeps it and its client expects it.
func URIHost(host string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]"
	}
	return host
}

// Transaction sends req in a client transaction.
func (c *Caller) Transaction(ctx context.Context, req *sipmsg.Request) (sipmsg.ClientTransaction, error) {
	return c.client.TransactionRequest(ctx, req)
}

// Final sends req and returns its final response (provisional ones are
// skipped), or nil when the transaction ends without one.
func (c *Caller) Final(ctx context.Context, req *sipmsg.Request) *sipmsg.Response {
	tx, err := c.client.TransactionRequest(ctx, req)
	if err != nil {
		return nil
	}
	defer tx.Terminate()
	for {
		select {
		case r := <-tx.Responses():
			if r.IsProvisional() {
				continue
			}
			return r
		case <-tx.Done():
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// Transport is the transport of the caller's requests ("UDP" or "TLS").
func (c *Caller) Transport() string {
	if c.transport == "" {
		return "UDP"
	}
	return c.transport
}

// Client exposes the caller's sipgo client.
func (c *Caller) Client() *sipgo.Client { return c.client }

// WriteRaw sends raw bytes from a fresh UDP socket on ip to addr.
func WriteRaw(t testing.TB, ip, addr string, data []byte) {
	t.Helper()
	ra, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatalf("resolve %s: %v", addr, err)
	}
	conn, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)}, ra)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write(data); err != nil {
		t.Fatalf("write raw: %v", err)
	}
}

// CancelFor builds the CANCEL of a sent INVITE (same Request-URI, top Via,
// Call-ID, From, To and CSeq number; RFC 3261 9.1).
func CancelFor(inv *sipmsg.Request) *sipmsg.Request {
	cr := sipmsg.NewRequest(sipmsg.CANCEL, *inv.Recipient.Clone())
	cr.AppendHeader(inv.Via().Clone())
	mf := sipmsg.MaxForwardsHeader(70)
	cr.AppendHeader(&mf)
	cr.AppendHeader(sipmsg.HeaderClone(inv.From()))
	cr.AppendHeader(sipmsg.HeaderClone(inv.To()))
	cr.AppendHeader(sipmsg.HeaderClone(inv.CallID()))
	cr.AppendHeader(&sipmsg.CSeqHeader{SeqNo: inv.CSeq().SeqNo, MethodName: sipmsg.CANCEL})
	cr.SetBody(nil)
	cr.SetTransport(inv.Transport())
	cr.SetDestination(inv.Destination())
	cr.Laddr = inv.Laddr
	return cr
}
