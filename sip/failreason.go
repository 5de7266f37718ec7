package sip

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/tlspolicy"
)

// sendReason names why a request could not be sent to a carrier, or why
// its transaction failed, in a few stable words an operator reads in a
// carrier's health reason (cpsguard status, the carrier down log line):
// "connection refused", "TLS certificate not trusted". Never the error's
// own text: sipgo's ("client transcation failed to request connection:
// Transport<TCP> dial err=dial tcp <nil>->192.0.2.7:5060: connect: …")
// changes with its versions and is no reason to read. The full error goes
// to the debug log. The set of answers is closed (a failure it does not
// know is "send failed"), so a reason is also fit for a label.
func sendReason(err error) string {
	var (
		dns      *net.DNSError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		alert    tls.AlertError
		record   tls.RecordHeaderError
		netErr   net.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.As(err, &dns):
		return dnsReason(dns)
	case errors.Is(err, tlspolicy.ErrNoCertificate):
		return "TLS: no certificate"
	case errors.As(err, &unknown):
		return "TLS certificate not trusted"
	case errors.As(err, &hostname):
		return "TLS certificate does not name the carrier"
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "TLS certificate expired"
		}
		return "TLS certificate invalid"
	case errors.As(err, &alert):
		return "TLS handshake refused"
	case errors.As(err, &record):
		return "TLS handshake failed: not a TLS server"
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "connect timeout"
	case errors.Is(err, sipmsg.ErrTransactionTimeout):
		return noAnswer
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE):
		return "connection closed"
	case errors.Is(err, sipmsg.ErrTransactionTransport):
		return "transport error"
	}
	return "send failed"
}

// addressReason names why a carrier's address is not known (its host
// name did not resolve), as sendReason does for a send.
func addressReason(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dnsReason(dns)
	}
	return "DNS: no address"
}

func dnsReason(e *net.DNSError) string {
	switch {
	case e.IsNotFound:
		return "DNS: no such host"
	case e.IsTimeout:
		return "DNS: timeout"
	}
	return "DNS: lookup failed"
}

// answered is the reason of a carrier's final answer: its status code
// only ("answered 503"); the reason phrase is the carrier's own text.
func answered(code int) string {
	return "answered " + strconv.Itoa(code)
}
