package tlspolicy

import (
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// logBuf is a concurrency-safe buffer for a test's log lines.
type logBuf struct{ testlog.Buffer }

// count is the number of log lines holding s.
func (l *logBuf) count(s string) int { return strings.Count(l.String(), s) }

// install copies src onto dst and gives dst the modification time mod,
// so that a change shows whatever the file system's time resolution.
func install(t *testing.T, src, dst string, mod time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// TestServerCertificateReloadedOnChange: the listeners' certificate is
// read again when its files change, looked at no more than once a
// checkEvery; files that change but do not load leave the last good
// certificate in use, logged once per change; files that never loaded
// fail the configuration.
func TestServerCertificateReloadedOnChange(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	oldCert, oldKey := f.Leaf(t, "old", []string{"old.test"}, nil, false)
	newCert, newKey := f.Leaf(t, "new", []string{"new.test"}, nil, false)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")

	cfg := &config.Config{}
	cfg.SIP.TLS = config.SIPTLS{CertFile: certFile, KeyFile: keyFile}
	var logs logBuf
	s := New(Options{Config: func() *config.Config { return cfg }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	mod := now.Add(-time.Hour)

	served := func() string {
		t.Helper()
		c, err := s.serverConfig(cfg)
		if err != nil {
			t.Fatalf("serverConfig: %v", err)
		}
		leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}

	// No files yet: the listener cannot start.
	if _, err := s.Server(cfg); err == nil {
		t.Fatal("Server without certificate files: got nil error, want one")
	}

	install(t, oldCert, certFile, mod)
	install(t, oldKey, keyFile, mod)
	now = now.Add(checkEvery)
	if got := served(); got != "old" {
		t.Fatalf("first read: serving %q, want old", got)
	}
	first, _ := s.serverConfig(cfg)

	// Renewed, but looked at again only after checkEvery.
	mod = mod.Add(time.Minute)
	install(t, newCert, certFile, mod)
	install(t, newKey, keyFile, mod)
	now = now.Add(checkEvery / 2)
	if got := served(); got != "old" {
		t.Fatalf("within checkEvery of the last look: serving %q, want old", got)
	}
	if again, _ := s.serverConfig(cfg); again != first {
		t.Error("unchanged files: got a new tls.Config, want the same one (session tickets)")
	}
	now = now.Add(checkEvery)
	if got := served(); got != "new" {
		t.Fatalf("after checkEvery: serving %q, want new", got)
	}
	if got := logs.count("sip.tls files read"); got != 2 {
		t.Errorf("logged %d reads, want 2 (one per change)", got)
	}

	// A half-written renewal: the old key with a new certificate does
	// not load; the last good pair stays, the failure logged once.
	mod = mod.Add(time.Minute)
	install(t, oldCert, certFile, mod)
	for i := range 3 {
		now = now.Add(checkEvery)
		if got := served(); got != "new" {
			t.Fatalf("look %d at a pair that does not load: serving %q, want new (the last good)", i, got)
		}
	}
	if got := logs.count("do not load"); got != 1 {
		t.Errorf("logged %d load failures for one change, want 1", got)
	}

	// The key follows: loaded.
	install(t, oldKey, keyFile, mod)
	now = now.Add(checkEvery)
	if got := served(); got != "old" {
		t.Fatalf("after the key followed: serving %q, want old", got)
	}
}

// TestFileCacheNeverLoaded: files that never loaded return an error,
// the same error again without a new read while they stay unchanged.
func TestFileCacheNeverLoaded(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(file, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	loads := 0
	c := fileCache[*x509.CertPool]{load: func(files []string) (*x509.CertPool, error) {
		loads++
		return config.LoadCAs(files[0])
	}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		v, _, _, err := c.get([]string{file}, now.Add(time.Duration(i)*checkEvery))
		if err == nil || v != nil {
			t.Fatalf("look %d: got %v, %v; want no pool and an error", i, v, err)
		}
	}
	if loads != 1 {
		t.Errorf("loaded %d times, want 1 (unchanged files are not read again)", loads)
	}
}
