package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a test PKI: a CA, a server certificate for
// 127.0.0.1 and the name "redis.test", and a client certificate.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCA is a CA that signed none of them (for a verification failure).
	OtherCA string

	dir    string
	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
}

// Leaf issues one more certificate from f's CA into f's directory, as
// name.crt and name.key: for the DNS names and IP addresses given, a
// server certificate (server and client use when client is true). It
// returns the two paths.
func (f TLSFiles) Leaf(t testing.TB, name string, dnsNames []string, ips []net.IP, client bool) (cert, key string) {
	t.Helper()
	if f.caKey == nil {
		t.Fatal("redistest: Leaf needs TLSFiles from NewTLSFiles")
	}
	use := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if client {
		use = append(use, x509.ExtKeyUsageClientAuth)
	}
	cert, key = filepath.Join(f.dir, name+".crt"), filepath.Join(f.dir, name+".key")
	leaf(t, f.caKey, f.caCert, &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, DNSNames: dnsNames, IPAddresses: ips, ExtKeyUsage: use,
	}, cert, key)
	return cert, key
}

// NewTLSFiles writes a fresh test PKI into a temporary directory.
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caDER := newCA(t, "cpsguard test CA")
	_, _, otherDER := newCA(t, "unrelated CA")
	f := TLSFiles{
		CA:         writePEM(t, dir, "ca.crt", "CERTIFICATE", caDER),
		OtherCA:    writePEM(t, dir, "other-ca.crt", "CERTIFICATE", otherDER),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
		dir: dir, caKey: caKey, caCert: caCert,
	}
	leaf(t, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "redis.test"},
		DNSNames:    []string{"redis.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, f.ServerCert, f.ServerKey)
	leaf(t, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "cpsguard"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, f.ClientCert, f.ClientKey)
	return f
}

var serial int64

func next() *big.Int { serial++; return big.NewInt(serial + time.Now().UnixNano()) }

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: next(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func leaf(t testing.TB, caKey *ecdsa.PrivateKey, ca *x509.Certificate, tmpl *x509.Certificate, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = next()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Dir(certPath), filepath.Base(certPath), "CERTIFICATE", der)
	writePEM(t, filepath.Dir(keyPath), filepath.Base(keyPath), "EC PRIVATE KEY", kder)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// StartTLS runs a private redis-server that also serves TLS on a second
// free loopback port with f's server certificate; requireClient makes it
// demand a client certificate signed by f's CA. It returns the server (its
// Addr is the plain port, used for readiness) and the TLS address.
func StartTLS(t testing.TB, f TLSFiles, requireClient bool) (*Server, string) {
	t.Helper()
	auth := "optional"
	if requireClient {
		auth = "yes"
	}
	port := FreePort(t)
	s := Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", auth)
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
