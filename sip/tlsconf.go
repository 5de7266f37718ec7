package sip

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// SIP over TLS (sip.tls).
//
// The tls:// listeners are TCP listeners behind the same guard as
// tcp:// ones (package sip/internal/conns: per-source and total bounds, strangers closed at
// accept when unknown_source is drop, sipgo's idle timeout), wrapped in
// crypto/tls and served by sipgo's TLS transport. Each handshake takes its
// configuration from the current snapshot (GetConfigForClient): the
// certificate of sip.tls.cert_file and key_file, and with
// sip.tls.client_ca_file a client certificate signed by one of those CAs
// is required. The files are read again when they change (size or
// modification time, checked at a handshake at most once a
// tlsCheckEvery): a renewed certificate is served from the next
// handshakes on, no restart or reload needed. Files that change but do
// not load (a key written before its certificate) leave the last good
// ones in use; the failure is logged once per change.
//
// Carriers reached over TLS (sips: URIs, ;transport=tls) are dialled by
// sipgo with the client configuration of New. sipgo dials the address the
// proxy resolved and names the server by that address, which crypto/tls
// then neither sends (no SNI for an address) nor shows to a verification
// hook; so the handshake verifies the chain only, against
// sip.tls.ca_file (else the system roots: verifyChain), and before a
// request leaves on a connection the proxy opened, tlsHop checks the
// certificate's name: the carrier's URI host name (RFC 5922), or its
// address when the URI holds one (tlsNames for an in-dialog hop, found by
// its address). A connection whose certificate does not name its hop is
// closed before a byte of SIP is written on it. A carrier that asks for a
// client certificate gets sip.tls.cert_file's.

// tlsCheckEvery is how often, at most, a handshake looks at whether the
// TLS files changed.
const tlsCheckEvery = time.Second

// fileStamp is what tells a changed file: its size and modification time
// (os.Stat follows symbolic links, so a Kubernetes secret's swap of the
// link's target shows too).
type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func stampOf(file string) fileStamp {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
}

// fileCache keeps a value read from files and reads them again when one
// of them changes, looking at most once a tlsCheckEvery. Safe for
// concurrent use.
type fileCache[T any] struct {
	load func(files []string) (T, error)

	mu      sync.Mutex
	files   []string
	stamps  []fileStamp
	checked time.Time
	val     T
	ok      bool
}

// get returns the value of files, read again when files differ from the
// last call's or one of them changed. When they do not load, the last
// good value stays (loaded reports the error); err is set only when there
// never was one. loaded reports a new read (nil error) or a failed one.
func (c *fileCache[T]) get(files []string, now time.Time) (val T, loaded bool, loadErr, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	same := slices.Equal(files, c.files)
	if same && c.ok && now.Sub(c.checked) < tlsCheckEvery {
		return c.val, false, nil, nil
	}
	stamps := make([]fileStamp, len(files))
	for i, f := range files {
		stamps[i] = stampOf(f)
	}
	c.checked = now
	if same && slices.Equal(stamps, c.stamps) {
		if c.ok {
			return c.val, false, nil, nil
		}
		// Unchanged files that did not load: no new attempt, same error.
		var zero T
		return zero, false, nil, errors.New("sip: TLS files do not load (unchanged since)")
	}
	c.files, c.stamps = slices.Clone(files), stamps
	v, lerr := c.load(files)
	if lerr != nil {
		if c.ok {
			return c.val, true, lerr, nil
		}
		var zero T
		return zero, true, lerr, lerr
	}
	c.val, c.ok = v, true
	return v, true, nil, nil
}

// tlsState is the proxy's TLS material, read from sip.tls's files.
type tlsState struct {
	cert      fileCache[*tls.Certificate]
	clientCAs fileCache[*x509.CertPool]
	roots     fileCache[*x509.CertPool]

	mu   sync.Mutex
	last struct {
		cert *tls.Certificate
		cas  *x509.CertPool
		conf *tls.Config
	}
	// verified memoizes tlsHop's checks (a certificate is kept by its
	// connection; at most tlsVerifiedMax, then forgotten at once).
	verified map[tlsVerified]struct{}
}

func newTLSState() *tlsState {
	loadCAs := func(files []string) (*x509.CertPool, error) { return config.LoadCAs(files[0]) }
	return &tlsState{
		cert: fileCache[*tls.Certificate]{load: func(files []string) (*tls.Certificate, error) {
			c, err := config.SIPTLS{CertFile: files[0], KeyFile: files[1]}.Certificate()
			return &c, err
		}},
		clientCAs: fileCache[*x509.CertPool]{load: loadCAs},
		roots:     fileCache[*x509.CertPool]{load: loadCAs},
		verified:  map[tlsVerified]struct{}{},
	}
}

// tlsFile reads one of sip.tls's files through its cache, and logs a new
// read or a failed one.
func tlsFile[T any](p *Proxy, c *fileCache[T], what string, files ...string) (T, error) {
	v, loaded, loadErr, err := c.get(files, time.Now())
	switch {
	case loadErr != nil && err == nil:
		p.log.Warn("sip.tls files changed but do not load; the last good ones stay in use", "what", what,
			"files", strings.Join(files, ","), "error", loadErr)
	case loadErr == nil && loaded:
		p.log.Info("sip.tls files read", "what", what, "files", strings.Join(files, ","))
	}
	return v, err
}

// serverTLS is the configuration of the tls:// listeners: each handshake
// gets serverConfig's of the snapshot current then. It fails when the
// certificate (or the client CAs) of cfg do not load.
func (p *Proxy) serverTLS(cfg *config.Config) (*tls.Config, error) {
	if _, err := p.serverConfig(cfg); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return p.serverConfig(p.cfg())
		},
	}, nil
}

// serverConfig is the TLS server configuration of cfg's sip.tls. It is
// built again only when the certificate or the client CAs changed (one
// configuration keeps session tickets valid between handshakes).
func (p *Proxy) serverConfig(cfg *config.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, errors.New("sip: no configuration")
	}
	t := cfg.SIP.TLS
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, errors.New("sip: sip.tls.cert_file and key_file are required by a tls:// listener")
	}
	cert, err := tlsFile(p, &p.tls.cert, "certificate", t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("sip.tls certificate: %w", err)
	}
	var cas *x509.CertPool
	if t.ClientCAFile != "" {
		// Fail closed: with mutual TLS asked for, a missing CA file is
		// no reason to take clients without certificates.
		if cas, err = tlsFile(p, &p.tls.clientCAs, "client CAs", t.ClientCAFile); err != nil {
			return nil, fmt.Errorf("sip.tls.client_ca_file: %w", err)
		}
	}
	s := p.tls
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.conf != nil && s.last.cert == cert && s.last.cas == cas {
		return s.last.conf, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}
	if cas != nil {
		c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, cas
	}
	s.last.cert, s.last.cas, s.last.conf = cert, cas, c
	return c, nil
}

// clientTLS is the configuration sipgo dials TLS next hops with.
func (p *Proxy) clientTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// sipgo names the server by the address it dials: crypto/tls
		// would check that address against the certificate. The chain is
		// verifyChain's, the name tlsHop's, before the connection is
		// used.
		InsecureSkipVerify:   true, //nolint:gosec // verified by VerifyConnection and tlsHop
		VerifyConnection:     p.verifyChain,
		GetClientCertificate: p.clientCertificate,
	}
}

// carrierRoots are the CAs that verify TLS next hops: sip.tls.ca_file's,
// nil for the system roots.
func (p *Proxy) carrierRoots(cfg *config.Config) (*x509.CertPool, error) {
	if cfg == nil || cfg.SIP.TLS.CAFile == "" {
		return nil, nil
	}
	r, err := tlsFile(p, &p.tls.roots, "carrier CAs", cfg.SIP.TLS.CAFile)
	if err != nil {
		return nil, fmt.Errorf("sip.tls.ca_file: %w", err)
	}
	return r, nil
}

// verifyChain checks a TLS next hop's certificate chain in the handshake:
// signed, through the intermediates it sent, by carrierRoots.
func (p *Proxy) verifyChain(cs tls.ConnectionState) error {
	_, err := p.verifyName(cs, "")
	return err
}

// verifyName checks cs's certificate chain and, when name is not empty,
// that the certificate names it (a host name, or an address for its IP
// SANs). It returns the roots it checked against.
func (p *Proxy) verifyName(cs tls.ConnectionState, name string) (*x509.CertPool, error) {
	if len(cs.PeerCertificates) == 0 {
		return nil, errors.New("sip: TLS next hop sent no certificate")
	}
	roots, err := p.carrierRoots(p.cfg())
	if err != nil {
		return nil, err
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter})
	return roots, err
}

// tlsVerifiedMax bounds the memo of certificates tlsHop checked.
const tlsVerifiedMax = 4096

// tlsVerified is a certificate a connection presented, checked against a
// name under some roots.
type tlsVerified struct {
	leaf  *x509.Certificate
	roots *x509.CertPool
	name  string
}

// tlsHop checks, before req leaves over TLS, that the next hop's
// certificate names it: names (the carrier's URI host, or its address),
// else tlsNames of the address req goes to. It opens the connection
// sipgo will send req on (sipgo keeps it in its pool) and closes it when
// the certificate names none of them. Requests over UDP or TCP, and
// connections a peer opened to the proxy, pass as they are.
func (p *Proxy) tlsHop(ctx context.Context, req *sipmsg.Request, names []string) error {
	if req.Transport() != "TLS" {
		return nil
	}
	c, err := p.tp.ClientRequestConnection(ctx, req)
	if err != nil {
		return err
	}
	if err := p.checkTLSConn(c, req, names); err != nil {
		// Closed (its refcount with it); sipgo's reader of it drops it
		// from the pool.
		_ = c.Close()
		return err
	}
	_, _ = c.TryClose() // ClientRequestConnection's reference
	return nil
}

// checkTLSConn is tlsHop's check of the connection c that req would
// leave on.
func (p *Proxy) checkTLSConn(c sipmsg.Connection, req *sipmsg.Request, names []string) error {
	tc, ok := c.(*sipmsg.TCPConnection)
	if !ok {
		return nil
	}
	conn, ok := tc.Conn.(*tls.Conn)
	if !ok || p.ownTLSAddr(conn.LocalAddr()) {
		return nil // accepted by a tls:// listener: a peer's own connection
	}
	raddr, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	if len(names) == 0 {
		names = p.tlsNames(p.cfg(), hostOfDest(req.Destination(), raddr.Addr()))
	}
	cs := conn.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return errors.New("sip: TLS next hop sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	roots, err := p.carrierRoots(p.cfg())
	if err != nil {
		return err
	}
	s := p.tls
	s.mu.Lock()
	for _, n := range names {
		if _, ok := s.verified[tlsVerified{leaf, roots, n}]; ok {
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	var first error
	for _, n := range names {
		if _, err := p.verifyName(cs, n); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		s.mu.Lock()
		if len(s.verified) >= tlsVerifiedMax {
			clear(s.verified)
		}
		s.verified[tlsVerified{leaf, roots, n}] = struct{}{}
		s.mu.Unlock()
		return nil
	}
	p.m.SIPErrors.WithLabelValues("tls_name").Inc()
	return fmt.Errorf("sip: TLS certificate of %s does not name %s: %w", conn.RemoteAddr(), strings.Join(names, " or "), first)
}

// hostOfDest is the host of a request's destination (host:port) when it
// is a name, else the address dialled.
func hostOfDest(dest string, dialled netip.Addr) string {
	host, _, err := net.SplitHostPort(dest)
	if err == nil {
		if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err != nil && host != "" {
			return host
		}
	}
	return dialled.String()
}

// ownTLSAddr reports whether a is the local address of one of the
// proxy's tls:// listeners (a connection a peer opened).
func (p *Proxy) ownTLSAddr(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap().WithZone("")
	for _, l := range p.listeners {
		if l.network == "tls" && l.addr.Port() == ap.Port() && (l.addr.Addr() == ip || l.addr.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// tlsNames are the names a TLS next hop reached at server (the address
// dialled, or a host name sipgo resolved itself) may prove: a host name is itself; for an address, the URI host names of the
// TLS carriers that resolve to it (RFC 5922: the domain of the URI, never
// the address a DNS answer gave), and the address itself when a TLS
// carrier's URI holds it or no carrier's host name resolves to it (a
// Contact the proxy sends to).
func (p *Proxy) tlsNames(cfg *config.Config, server string) []string {
	ip, err := netip.ParseAddr(strings.Trim(server, "[]"))
	if err != nil {
		return []string{server}
	}
	ip = ip.Unmap().WithZone("")
	var names []string
	literal := false
	if cfg != nil {
		for _, c := range carrierTargets(cfg) {
			if c.Err != nil || c.Target.Transport != "TLS" {
				continue
			}
			host := strings.Trim(c.Target.Host, "[]")
			if a, err := netip.ParseAddr(host); err == nil {
				literal = literal || a.Unmap() == ip
				continue
			}
			if p.carriers.ResolvesTo(host, ip) && !slices.Contains(names, host) {
				names = append(names, host)
			}
		}
	}
	if literal || len(names) == 0 {
		names = append(names, ip.String())
	}
	return names
}

// clientCertificate is the certificate offered to a TLS next hop that asks
// for one: sip.tls.cert_file's, else none.
func (p *Proxy) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cfg := p.cfg()
	if cfg == nil || cfg.SIP.TLS.CertFile == "" || cfg.SIP.TLS.KeyFile == "" {
		return &tls.Certificate{}, nil
	}
	c, err := tlsFile(p, &p.tls.cert, "certificate", cfg.SIP.TLS.CertFile, cfg.SIP.TLS.KeyFile)
	if err != nil {
		return &tls.Certificate{}, nil // none: the next hop decides
	}
	return c, nil
}
