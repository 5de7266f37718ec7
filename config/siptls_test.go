package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// tlsYAML is a configuration with a tls:// listener and sip.tls set to the
// files of f (%s: cert, key, client CA, carrier CA), a TLS carrier and a
// sips: one.
const tlsYAML = `
sip:
  listen: [udp://127.0.0.1:5060, tls://127.0.0.1:5061]
  tls: {cert_file: %q, key_file: %q, client_ca_file: %q, ca_file: %q}
peers:
  - {name: dialer-1, sources: [127.0.0.1/32], cps: 50}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5071;transport=tls", cps: 10}
  - {name: carrier-b, uri: "sips:carrier.example", cps: 10}
routes:
  default: [carrier-a, carrier-b]
`

func TestSIPTLSLoads(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	c, err := Parse([]byte(fmt.Sprintf(tlsYAML, f.ServerCert, f.ServerKey, f.CA, f.CA)))
	if err != nil {
		t.Fatalf("valid TLS configuration refused: %v", err)
	}
	if c.SIP.TLS.CertFile != f.ServerCert || c.SIP.TLS.ClientCAFile != f.CA || c.SIP.TLS.CAFile != f.CA {
		t.Errorf("sip.tls = %+v", c.SIP.TLS)
	}
	// The certificate with another certificate's key.
	_, err = Parse([]byte(fmt.Sprintf(tlsYAML, f.ServerCert, f.ClientKey, "", "")))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.HasPrefix(ve.Errors[0], "sip.tls.cert_file: cannot load the certificate and key: tls: private key does not match public key") {
		t.Errorf("mismatched key: got %v, want one sip.tls.cert_file error", err)
	}
	// A CA file without a certificate in it.
	_, err = Parse([]byte(fmt.Sprintf(tlsYAML, f.ServerCert, f.ServerKey, f.ServerKey, "")))
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0] != "sip.tls.client_ca_file: no PEM certificate in "+f.ServerKey {
		t.Errorf("CA file of a key: got %v, want one sip.tls.client_ca_file error", err)
	}
}
