package tlspolicy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// Options are what a Policy needs of the proxy. Every field may be nil
// (Config: no configuration; Conn: no request can be checked; Logger:
// slog.Default; the rest: none).
type Options struct {
	// Config returns the current configuration snapshot.
	Config func() *config.Config
	// Logger logs the reads of sip.tls's files and their failures.
	Logger *slog.Logger
	// Conn returns the connection req would leave on, opened if need be
	// and kept in sipgo's pool, with a reference for the caller (sipgo's
	// TransportLayer.ClientRequestConnection).
	Conn func(ctx context.Context, req *sipmsg.Request) (sipmsg.Connection, error)
	// TLSListeners yields the local addresses of the proxy's tls://
	// listeners (a connection from one of them is a peer's own).
	TLSListeners iter.Seq[netip.AddrPort]
	// CarrierHosts yields the URI hosts (names or addresses, as written)
	// of cfg's carriers reached over TLS whose URIs parse.
	CarrierHosts func(cfg *config.Config) iter.Seq[string]
	// ResolvesTo reports whether the carrier host name host resolved to a.
	ResolvesTo func(host string, a netip.Addr) bool
	// NameFailed counts a next hop whose certificate does not name it.
	NameFailed func()
}

// Policy is the proxy's SIP over TLS: the files of sip.tls, the listeners'
// and the dialled connections' configurations and the names checked on
// each hop. Safe for concurrent use.
type Policy struct {
	o   Options
	log *slog.Logger
	now func() time.Time

	cert      fileCache[*tls.Certificate]
	clientCAs fileCache[*x509.CertPool]
	roots     fileCache[*x509.CertPool]

	mu   sync.Mutex
	last struct {
		cert *tls.Certificate
		cas  *x509.CertPool
		conf *tls.Config
	}
	// verified memoizes CheckHop's checks (a certificate is kept by its
	// connection; at most verifiedMax, then forgotten at once).
	verified map[verifiedCert]struct{}
}

// New returns the Policy of o. It reads no file: the first handshake, or
// Server, does.
func New(o Options) *Policy {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	loadCAs := func(files []string) (*x509.CertPool, error) { return config.LoadCAs(files[0]) }
	return &Policy{
		o:   o,
		log: o.Logger,
		now: time.Now,
		cert: fileCache[*tls.Certificate]{load: func(files []string) (*tls.Certificate, error) {
			c, err := config.SIPTLS{CertFile: files[0], KeyFile: files[1]}.Certificate()
			return &c, err
		}},
		clientCAs: fileCache[*x509.CertPool]{load: loadCAs},
		roots:     fileCache[*x509.CertPool]{load: loadCAs},
		verified:  map[verifiedCert]struct{}{},
	}
}

// cfg is the current configuration snapshot, nil without one.
func (s *Policy) cfg() *config.Config {
	if s.o.Config == nil {
		return nil
	}
	return s.o.Config()
}

// Server is the configuration of the tls:// listeners: each handshake
// gets serverConfig's of the snapshot current then. It fails when the
// certificate (or the client CAs) of cfg do not load.
func (s *Policy) Server(cfg *config.Config) (*tls.Config, error) {
	if _, err := s.serverConfig(cfg); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.serverConfig(s.cfg())
		},
	}, nil
}

// serverConfig is the TLS server configuration of cfg's sip.tls. It is
// built again only when the certificate or the client CAs changed (one
// configuration keeps session tickets valid between handshakes).
func (s *Policy) serverConfig(cfg *config.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, errors.New("sip: no configuration")
	}
	t := cfg.SIP.TLS
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, errors.New("sip: sip.tls.cert_file and key_file are required by a tls:// listener")
	}
	cert, err := file(s, &s.cert, "certificate", t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("sip.tls certificate: %w", err)
	}
	var cas *x509.CertPool
	if t.ClientCAFile != "" {
		// Fail closed: with mutual TLS asked for, a missing CA file is
		// no reason to take clients without certificates.
		if cas, err = file(s, &s.clientCAs, "client CAs", t.ClientCAFile); err != nil {
			return nil, fmt.Errorf("sip.tls.client_ca_file: %w", err)
		}
	}
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

// Client is the configuration sipgo dials TLS next hops with.
func (s *Policy) Client() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// sipgo names the server by the address it dials: crypto/tls
		// would check that address against the certificate. The chain is
		// verifyChain's, the name CheckHop's, before the connection is
		// used.
		InsecureSkipVerify:   true, //nolint:gosec // verified by VerifyConnection and CheckHop
		VerifyConnection:     s.verifyChain,
		GetClientCertificate: s.clientCertificate,
	}
}

// clientCertificate is the certificate offered to a TLS next hop that asks
// for one: sip.tls.cert_file's, else none.
func (s *Policy) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cfg := s.cfg()
	if cfg == nil || cfg.SIP.TLS.CertFile == "" || cfg.SIP.TLS.KeyFile == "" {
		return &tls.Certificate{}, nil
	}
	c, err := file(s, &s.cert, "certificate", cfg.SIP.TLS.CertFile, cfg.SIP.TLS.KeyFile)
	if err != nil {
		return &tls.Certificate{}, nil // none: the next hop decides
	}
	return c, nil
}

// carrierRoots are the CAs that verify TLS next hops: sip.tls.ca_file's,
// nil for the system roots.
func (s *Policy) carrierRoots(cfg *config.Config) (*x509.CertPool, error) {
	if cfg == nil || cfg.SIP.TLS.CAFile == "" {
		return nil, nil
	}
	r, err := file(s, &s.roots, "carrier CAs", cfg.SIP.TLS.CAFile)
	if err != nil {
		return nil, fmt.Errorf("sip.tls.ca_file: %w", err)
	}
	return r, nil
}

// verifyChain checks a TLS next hop's certificate chain in the handshake:
// signed, through the intermediates it sent, by carrierRoots.
func (s *Policy) verifyChain(cs tls.ConnectionState) error {
	_, err := s.verifyName(cs, "")
	return err
}

// ErrNoCertificate: a carrier's TLS server sent no certificate.
var ErrNoCertificate = errors.New("sip: TLS next hop sent no certificate")

// verifyName checks cs's certificate chain and, when name is not empty,
// that the certificate names it (a host name, or an address for its IP
// SANs). It returns the roots it checked against.
func (s *Policy) verifyName(cs tls.ConnectionState, name string) (*x509.CertPool, error) {
	if len(cs.PeerCertificates) == 0 {
		return nil, ErrNoCertificate
	}
	roots, err := s.carrierRoots(s.cfg())
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
