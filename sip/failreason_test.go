package sip

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/tlspolicy"
)

// A carrier's health reason names a failure in fixed words, never the SIP
// stack's text: it said "send: client transcation failed to request
// connection: Transport<TCP> dial err=dial tcp <nil>->192.0.2.7:5060:
// connect: connection refused".
func TestSendReason(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return fmt.Errorf("client transcation failed to request connection: %w",
			fmt.Errorf("Transport<TCP> dial err=%w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}))
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{dial(syscall.ECONNREFUSED), "connection refused"},
		{dial(syscall.ECONNRESET), "connection reset"},
		{dial(syscall.EHOSTUNREACH), "host unreachable"},
		{dial(syscall.ENETUNREACH), "network unreachable"},
		{fmt.Errorf("TLS handshake error: %w", context.DeadlineExceeded), "connect timeout"},
		{fmt.Errorf("TLS handshake error: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), "TLS certificate not trusted"},
		{fmt.Errorf("sip: TLS certificate of 192.0.2.7:5061 does not name carrier.example: %w", x509.HostnameError{Host: "carrier.example"}), "TLS certificate does not name the carrier"},
		{x509.CertificateInvalidError{Reason: x509.Expired}, "TLS certificate expired"},
		{x509.CertificateInvalidError{Reason: x509.NotAuthorizedToSign}, "TLS certificate invalid"},
		{tlspolicy.ErrNoCertificate, "TLS: no certificate"},
		{fmt.Errorf("TLS handshake error: %w", tls.AlertError(40)), "TLS handshake refused"},
		{fmt.Errorf("Timer_B timed out. %w", sipmsg.ErrTransactionTimeout), "no answer"},
		{fmt.Errorf("connection closed: %w", sipmsg.ErrTransactionTransport), "transport error"},
		{fmt.Errorf("read: %w", net.ErrClosed), "connection closed"},
		{&net.DNSError{Err: "no such host", Name: "carrier.example", IsNotFound: true}, "DNS: no such host"},
		{errors.New("sipgo v9: something new"), "send failed"},
	} {
		if got := sendReason(tc.err); got != tc.want {
			t.Errorf("sendReason(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf(`resolve carrier host "carrier.example": %w`, &net.DNSError{Err: "no such host", Name: "carrier.example", Server: "10.0.0.53:53", IsNotFound: true}), "DNS: no such host"},
		{fmt.Errorf(`resolve carrier host "carrier.example": %w`, &net.DNSError{Err: "i/o timeout", Name: "carrier.example", IsTimeout: true}), "DNS: timeout"},
		{fmt.Errorf(`resolve carrier host "carrier.example": %w`, &net.DNSError{Err: "server misbehaving", Name: "carrier.example"}), "DNS: lookup failed"},
		{errors.New(`carrier host "carrier.example": no address`), "DNS: no address"},
	} {
		if got := addressReason(tc.err); got != tc.want {
			t.Errorf("addressReason(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A probe's Detail (the health reason) is fixed words; its Raw keeps what
// came, for the debug log.
func TestProbeReason(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	busy := answerOptions(t, "503 Service Unavailable")
	pr := prober{h.p}
	for _, tc := range []struct {
		uri      string
		ok       bool
		detail   string
		raw      string // a part of Raw
		unanswer bool
	}{
		{"sip:" + car.Addr, true, "answered 200", "200 OK", false},
		{"sip:" + busy, false, "answered 503", "503 Service Unavailable", false},
		{"sip:" + refused + ";transport=tcp", false, "connection refused", "connect: connection refused", false},
	} {
		r := pr.Probe(context.Background(), &config.Carrier{Name: "x", URI: tc.uri}, 2*time.Second)
		if r.OK != tc.ok || r.Detail != tc.detail || !strings.Contains(r.Raw, tc.raw) || r.Unanswered != tc.unanswer {
			t.Errorf("probe of %s: %+v, want ok %v, detail %q, raw with %q", tc.uri, r, tc.ok, tc.detail, tc.raw)
		}
	}
}

// answerOptions answers every OPTIONS that comes to a UDP port of
// 127.0.0.1 with status (e.g. "503 Service Unavailable"); it returns the
// port's address.
func answerOptions(t *testing.T, status string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	keep := regexp.MustCompile(`(?mi)^(Via|From|To|Call-ID|CSeq):.*\r\n`)
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			head := strings.Join(keep.FindAllString(string(buf[:n]), -1), "")
			_, _ = pc.WriteTo([]byte("SIP/2.0 "+status+"\r\n"+head+"Content-Length: 0\r\n\r\n"), from)
		}
	}()
	return pc.LocalAddr().String()
}
