package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// TestRedisOverTLS: scripts run over TLS against a real redis-server; a
// server certificate from another CA is refused; a server that requires a
// client certificate accepts the configured one and refuses a client
// without it.
func TestRedisOverTLS(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	_, addr := redistest.StartTLS(t, f, false)
	_, mutual := redistest.StartTLS(t, f, true)
	try := func(addr string, tc config.RedisTLS) error {
		c, err := NewClient(&config.Redis{Addrs: []string{addr}, Timeout: 2 * time.Second, TLS: tc})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := lua.Load(ctx, c); err != nil {
			return err
		}
		return c.Set(ctx, "tls-check", "ok", time.Minute).Err()
	}
	for _, tc := range []struct {
		name    string
		addr    string
		tls     config.RedisTLS
		wantErr string
	}{
		{"verified by the CA", addr, config.RedisTLS{Enabled: true, CAFile: f.CA}, ""},
		{"server name checked", addr, config.RedisTLS{Enabled: true, CAFile: f.CA, ServerName: "redis.test"}, ""},
		{"wrong server name", addr, config.RedisTLS{Enabled: true, CAFile: f.CA, ServerName: "other.test"}, "certificate"},
		{"another CA", addr, config.RedisTLS{Enabled: true, CAFile: f.OtherCA}, "certificate"},
		{"mutual TLS", mutual, config.RedisTLS{Enabled: true, CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}, ""},
		{"mutual TLS without a client certificate", mutual, config.RedisTLS{Enabled: true, CAFile: f.CA}, "!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := try(tc.addr, tc.tls)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want success", err)
			case tc.wantErr == "!" && err == nil:
				t.Fatal("got success, want a refusal")
			case tc.wantErr != "" && tc.wantErr != "!" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error about %q", err, tc.wantErr)
			}
		})
	}
}

// TestRedisTLSConfigErrors: bad TLS files are configuration errors that
// name the setting, never key material.
func TestRedisTLSConfigErrors(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	for _, tc := range []struct {
		name string
		tls  config.RedisTLS
		want string
	}{
		{"missing CA", config.RedisTLS{Enabled: true, CAFile: "/nonexistent/ca.crt"}, "ca_file"},
		{"CA not PEM", config.RedisTLS{Enabled: true, CAFile: f.ServerKey + ".nope"}, "ca_file"},
		{"cert without key", config.RedisTLS{Enabled: true, CertFile: f.ClientCert}, "cert_file and key_file go together"},
		{"key of another cert", config.RedisTLS{Enabled: true, CertFile: f.ClientCert, KeyFile: f.ServerKey}, "cert_file/key_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.tls.ClientConfig()
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("got %v, want an error about %q", err, tc.want)
			}
		})
	}
}
