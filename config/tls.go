package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ClientConfig builds the tls.Config of t for connecting to a server
// (nil when TLS is not enabled). Files are read now: a reload picks up
// renewed certificates only through a restart, as store.* needs one.
func (t RedisTLS) ClientConfig() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// The error names the files, never the key material.
			return nil, fmt.Errorf("cert_file/key_file: %w", errors.Unwrap(err))
		}
		c.Certificates = []tls.Certificate{pair}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("cert_file and key_file go together")
	}
	return c, nil
}

// Certificate loads t's certificate and key (tls.LoadX509KeyPair). The
// error names the files, never the key material.
func (t SIPTLS) Certificate() (tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return pair, nil
}

// LoadCAs reads a PEM file of CA certificates into a pool; a file without
// one is an error.
func LoadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", file)
	}
	return pool, nil
}
