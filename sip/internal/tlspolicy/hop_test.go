package tlspolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"iter"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
)

// tlsServer serves TLS on 127.0.0.1 with cert and key, completing each
// handshake and then holding the connection open until the test ends.
func tlsServer(t *testing.T, cert, key string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			go func() {
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return l.Addr().String()
}

// request is an OPTIONS to uri (its ;transport= says how it leaves).
func request(t *testing.T, uri string) *sipmsg.Request {
	t.Helper()
	var u sipmsg.Uri
	if err := sipmsg.ParseUri(uri, &u); err != nil {
		t.Fatal(err)
	}
	return sipmsg.NewRequest(sipmsg.OPTIONS, u)
}

// TestCheckHopNames: before a request leaves over TLS, the next hop's
// certificate, verified against sip.tls.ca_file, must name one of the
// hop's names (given, else those of the address dialled); a connection
// whose certificate names none is closed and counted, a peer's own
// connection and a request over UDP pass unchecked.
func TestCheckHopNames(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	server := func(f redistest.TLSFiles, name string, dns []string, ips []net.IP) string {
		cert, key := f.Leaf(t, name, dns, ips, false)
		return tlsServer(t, cert, key)
	}
	both := server(f, "both", []string{"carrier.test"}, loopback)
	nameOnly := server(f, "nameonly", []string{"carrier.test"}, nil)
	ipOnly := server(f, "iponly", nil, loopback)
	untrusted := server(redistest.NewTLSFiles(t), "untrusted", []string{"carrier.test"}, loopback)

	cases := []struct {
		name      string
		addr      string   // the server dialled
		uri       string   // the request's
		names     []string // CheckHop's
		hosts     []string // the TLS carriers' URI hosts
		resolves  bool     // carrier.test resolves to 127.0.0.1
		own       bool     // the connection is the peer's, to a tls:// listener
		wantErr   string   // "" for none
		wantCount int      // tls_name
		wantOpen  bool
	}{
		{name: "URI host named", addr: nameOnly, uri: "sip:carrier.test;transport=tls", names: []string{"carrier.test"}, wantOpen: true},
		{name: "URI host not named", addr: both, uri: "sip:carrier.test;transport=tls", names: []string{"other.test"},
			wantErr: "does not name other.test", wantCount: 1},
		{name: "one of several names", addr: nameOnly, uri: "sip:carrier.test;transport=tls", names: []string{"other.test", "carrier.test"}, wantOpen: true},
		{name: "address named by an IP SAN", addr: both, uri: "sip:127.0.0.1;transport=tls", wantOpen: true},
		{name: "address not named, no carrier resolves to it", addr: nameOnly, uri: "sip:127.0.0.1;transport=tls",
			wantErr: "does not name 127.0.0.1", wantCount: 1},
		{name: "address of a carrier host name", addr: nameOnly, uri: "sip:127.0.0.1;transport=tls",
			hosts: []string{"carrier.test"}, resolves: true, wantOpen: true},
		{name: "carrier host name resolving elsewhere", addr: nameOnly, uri: "sip:127.0.0.1;transport=tls",
			hosts: []string{"carrier.test"}, wantErr: "does not name 127.0.0.1", wantCount: 1},
		{name: "address of a carrier host name, not itself", addr: ipOnly, uri: "sip:127.0.0.1;transport=tls",
			hosts: []string{"carrier.test"}, resolves: true, wantErr: "does not name carrier.test", wantCount: 1},
		{name: "address a carrier URI holds", addr: ipOnly, uri: "sip:127.0.0.1;transport=tls",
			hosts: []string{"carrier.test", "[::ffff:127.0.0.1]"}, resolves: true, wantOpen: true},
		{name: "chain of another CA", addr: untrusted, uri: "sip:carrier.test;transport=tls", names: []string{"carrier.test"},
			wantErr: "certificate signed by unknown authority"},
		{name: "a peer's own connection", addr: both, uri: "sip:carrier.test;transport=tls", names: []string{"other.test"}, own: true, wantOpen: true},
		{name: "over UDP", addr: both, uri: "sip:carrier.test", names: []string{"other.test"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{}
			cfg.SIP.TLS.CAFile = f.CA
			var failed atomic.Int64
			var conn *sipmsg.TCPConnection
			var own []netip.AddrPort
			dials := 0
			var s *Policy
			s = New(Options{
				Config: func() *config.Config { return cfg },
				Logger: slog.New(slog.DiscardHandler),
				Conn: func(ctx context.Context, req *sipmsg.Request) (sipmsg.Connection, error) {
					dials++
					d := tls.Dialer{Config: s.Client()}
					c, err := d.DialContext(ctx, "tcp", tc.addr)
					if err != nil {
						return nil, err
					}
					conn = &sipmsg.TCPConnection{Conn: c}
					conn.Ref(2) // sipgo's pool and the caller
					t.Cleanup(func() { _ = c.Close() })
					if tc.own {
						own = append(own, netip.MustParseAddrPort(c.LocalAddr().String()))
					}
					return conn, nil
				},
				TLSListeners: func(yield func(netip.AddrPort) bool) {
					for _, a := range own {
						if !yield(a) {
							return
						}
					}
				},
				CarrierHosts: func(*config.Config) iter.Seq[string] {
					return func(yield func(string) bool) {
						for _, h := range tc.hosts {
							if !yield(h) {
								return
							}
						}
					}
				},
				ResolvesTo: func(host string, a netip.Addr) bool {
					return tc.resolves && host == "carrier.test" && a == netip.MustParseAddr("127.0.0.1")
				},
				NameFailed: func() { failed.Add(1) },
			})
			req := request(t, tc.uri)
			// sipgo sets where a request goes, the address it resolved.
			req.SetDestination(tc.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			err := s.CheckHop(ctx, req, tc.names)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckHop: got %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("CheckHop: got %v, want an error holding %q", err, tc.wantErr)
			}
			if got := failed.Load(); got != int64(tc.wantCount) {
				t.Errorf("tls_name counted %d, want %d", got, tc.wantCount)
			}
			if tc.uri == "sip:carrier.test" {
				if dials != 0 {
					t.Errorf("a UDP request opened %d connections, want 0", dials)
				}
				return
			}
			if conn == nil {
				return // the handshake failed: no connection
			}
			_, werr := conn.Conn.Write([]byte("\r\n\r\n"))
			if open := !errors.Is(werr, net.ErrClosed); open != tc.wantOpen {
				t.Errorf("connection open after CheckHop: %v (write: %v), want %v", open, werr, tc.wantOpen)
			}
		})
	}
}

// TestCheckHopRemembers: a certificate checked against a name is not
// verified again for the same name and roots (the memo), and the memo
// forgets everything at once past verifiedMax.
func TestCheckHopRemembers(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	certA, keyA := f.Leaf(t, "a", []string{"carrier.test"}, nil, false)
	certB, keyB := f.Leaf(t, "b", []string{"carrier.test"}, nil, false)
	addrA, addrB := tlsServer(t, certA, keyA), tlsServer(t, certB, keyB)
	cfg := &config.Config{}
	cfg.SIP.TLS.CAFile = f.CA
	var s *Policy
	var last *sipmsg.TCPConnection
	s = New(Options{
		Config: func() *config.Config { return cfg },
		Logger: slog.New(slog.DiscardHandler),
		Conn: func(ctx context.Context, req *sipmsg.Request) (sipmsg.Connection, error) {
			d := tls.Dialer{Config: s.Client()}
			c, err := d.DialContext(ctx, "tcp", req.Destination())
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = c.Close() })
			last = &sipmsg.TCPConnection{Conn: c}
			last.Ref(2)
			return last, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(addr string) {
		t.Helper()
		req := request(t, "sip:carrier.test;transport=tls")
		req.SetDestination(addr)
		if err := s.CheckHop(ctx, req, []string{"carrier.test"}); err != nil {
			t.Fatalf("CheckHop of %s: %v", addr, err)
		}
	}
	memo := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.verified)
	}

	check(addrA)
	if got := memo(); got != 1 {
		t.Fatalf("memo holds %d checks after one, want 1", got)
	}
	s.mu.Lock()
	for i := len(s.verified); i < verifiedMax; i++ {
		s.verified[verifiedCert{name: strconv.Itoa(i)}] = struct{}{}
	}
	s.mu.Unlock()
	// A's connection checked again: remembered, the full memo kept.
	if err := s.checkConn(last, request(t, "sip:carrier.test;transport=tls"), []string{"carrier.test"}); err != nil {
		t.Fatalf("checkConn again: %v", err)
	}
	if got := memo(); got != verifiedMax {
		t.Errorf("memo holds %d after a remembered check, want %d (kept)", got, verifiedMax)
	}
	// B's certificate: new, into a full memo, forgotten at once.
	check(addrB)
	if got := memo(); got != 1 {
		t.Errorf("memo holds %d after a new check into a full memo, want 1 (forgotten at once)", got)
	}
}

func TestHostOfDest(t *testing.T) {
	dialled := netip.MustParseAddr("192.0.2.1")
	cases := []struct{ dest, want string }{
		{"carrier.test:5061", "carrier.test"},
		{"198.51.100.7:5061", "192.0.2.1"},
		{"[2001:db8::1]:5061", "192.0.2.1"},
		{"no port", "192.0.2.1"},
		{":5061", "192.0.2.1"},
	}
	for _, tc := range cases {
		if got := hostOfDest(tc.dest, dialled); got != tc.want {
			t.Errorf("hostOfDest(%q): got %q, want %q", tc.dest, got, tc.want)
		}
	}
}
