package sip

import (
	"crypto/tls"
	"errors"

	"github.com/cpsguard/cpsguard/config"
)

// serverTLS is the configuration of the tls:// listeners.
func (p *Proxy) serverTLS(cfg *config.Config) (*tls.Config, error) {
	return nil, errors.New("TLS is not supported yet")
}
