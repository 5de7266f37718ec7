package tlspolicy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// verifiedMax bounds the memo of certificates CheckHop checked.
const verifiedMax = 4096

// verifiedCert is a certificate a connection presented, checked against
// a name under some roots.
type verifiedCert struct {
	leaf  *x509.Certificate
	roots *x509.CertPool
	name  string
}

// CheckHop checks, before req leaves over TLS, that the next hop's
// certificate names it: names (the carrier's URI host, or its address),
// else the names of the address req goes to. It opens the connection
// sipgo will send req on (sipgo keeps it in its pool) and closes it when
// the certificate names none of them. Requests over UDP or TCP, and
// connections a peer opened to the proxy, pass as they are.
func (s *Policy) CheckHop(ctx context.Context, req *sipmsg.Request, names []string) error {
	if req.Transport() != "TLS" {
		return nil
	}
	if s.o.Conn == nil {
		return errors.New("sip: no TLS transport")
	}
	c, err := s.o.Conn(ctx, req)
	if err != nil {
		return err
	}
	if err := s.checkConn(c, req, names); err != nil {
		// Closed (its refcount with it); sipgo's reader of it drops it
		// from the pool.
		_ = c.Close()
		return err
	}
	_, _ = c.TryClose() // Conn's reference
	return nil
}

// checkConn is CheckHop's check of the connection c that req would
// leave on.
func (s *Policy) checkConn(c sipmsg.Connection, req *sipmsg.Request, names []string) error {
	tc, ok := c.(*sipmsg.TCPConnection)
	if !ok {
		return nil
	}
	conn, ok := tc.Conn.(*tls.Conn)
	if !ok || s.ownAddr(conn.LocalAddr()) {
		return nil // accepted by a tls:// listener: a peer's own connection
	}
	raddr, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	if len(names) == 0 {
		names = s.names(s.cfg(), hostOfDest(req.Destination(), raddr.Addr()))
	}
	cs := conn.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return ErrNoCertificate
	}
	leaf := cs.PeerCertificates[0]
	roots, err := s.carrierRoots(s.cfg())
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, n := range names {
		if _, ok := s.verified[verifiedCert{leaf, roots, n}]; ok {
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	var first error
	for _, n := range names {
		if _, err := s.verifyName(cs, n); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		s.mu.Lock()
		if len(s.verified) >= verifiedMax {
			clear(s.verified)
		}
		s.verified[verifiedCert{leaf, roots, n}] = struct{}{}
		s.mu.Unlock()
		return nil
	}
	if s.o.NameFailed != nil {
		s.o.NameFailed()
	}
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

// ownAddr reports whether a is the local address of one of the proxy's
// tls:// listeners (a connection a peer opened).
func (s *Policy) ownAddr(a net.Addr) bool {
	if s.o.TLSListeners == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap().WithZone("")
	for l := range s.o.TLSListeners {
		if l.Port() == ap.Port() && (l.Addr() == ip || l.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// names are the names a TLS next hop reached at server (the address
// dialled, or a host name sipgo resolved itself) may prove: a host name
// is itself; for an address, the URI host names of the TLS carriers that
// resolve to it (RFC 5922: the domain of the URI, never the address a DNS
// answer gave), and the address itself when a TLS carrier's URI holds it
// or no carrier's host name resolves to it (a Contact the proxy sends
// to).
func (s *Policy) names(cfg *config.Config, server string) []string {
	ip, err := netip.ParseAddr(strings.Trim(server, "[]"))
	if err != nil {
		return []string{server}
	}
	ip = ip.Unmap().WithZone("")
	var names []string
	literal := false
	if cfg != nil && s.o.CarrierHosts != nil {
		for host := range s.o.CarrierHosts(cfg) {
			host = strings.Trim(host, "[]")
			if a, err := netip.ParseAddr(host); err == nil {
				literal = literal || a.Unmap() == ip
				continue
			}
			if s.o.ResolvesTo != nil && s.o.ResolvesTo(host, ip) && !slices.Contains(names, host) {
				names = append(names, host)
			}
		}
	}
	if literal || len(names) == 0 {
		names = append(names, ip.String())
	}
	return names
}
