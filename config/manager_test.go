package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// versioned is a valid config whose limits all equal v, so a reader can tell
// a whole snapshot (all equal) from a torn one.
func versioned(v int) string {
	return fmt.Sprintf(`
peers:
  - {name: dialer-1, sources: [127.0.0.1/32], cps: %[1]d, customer: acme, customers: [acme]}
customers:
  - {name: acme, cps: %[1]d}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5070", cps: %[1]d, max_wait: 1s}
routes:
  default: [carrier-a]
`, v)
}

// invalid breaks versioned(v) in two ways.
func invalid(v int) string {
	return strings.Replace(versioned(v), "cps: "+fmt.Sprint(v)+", max_wait", "cps: -1, max_wiat", 1)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceByRename writes content next to path and renames it over path, as
// editors and Kubernetes do.
func replaceByRename(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newTestManager(t *testing.T, content string, opts ...Option) (*Manager, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cpsguard.yaml")
	writeFile(t, path, content)
	m, err := NewManager(path, opts...)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m, path
}

func TestNewManagerRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpsguard.yaml")
	writeFile(t, path, invalid(1))
	_, err := NewManager(path)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 2 {
		t.Fatalf("NewManager: got %v, want a ValidationError with 2 errors", err)
	}
	if _, err := NewManager(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("NewManager(missing): got %v, want fs.ErrNotExist", err)
	}
}

// TestReloadConcurrentReaders rewrites the file 100 times, valid and invalid
// alternately, while 8 goroutines read Current: every snapshot seen must be
// whole and valid, versions never go backwards, and exactly the invalid
// files are counted as failures.
func TestReloadConcurrentReaders(t *testing.T) {
	m, path := newTestManager(t, versioned(1))
	var results sync.Map // result -> *atomic.Int64
	for _, r := range []string{ReloadSuccess, ReloadFailure} {
		results.Store(r, new(atomic.Int64))
	}
	m.OnReload(func(r string) {
		n, _ := results.Load(r)
		n.(*atomic.Int64).Add(1)
	})
	var changes atomic.Int64
	m.OnChange(func(old, new *Config) {
		if old == nil || new == nil || new.Peers[0].CPS < old.Peers[0].CPS {
			t.Errorf("OnChange(%v, %v): want non-nil, increasing", old, new)
		}
		changes.Add(1)
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 8 {
		wg.Go(func() {
			last := 0.0
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := m.Current()
				v := c.Peers[0].CPS
				cu := c.Customer("acme")
				ca := c.Carrier("carrier-a")
				if cu == nil || ca == nil || cu.CPS != v || ca.CPS != v || ca.MaxWait != time.Second || v < 1 {
					t.Errorf("torn or invalid snapshot: peer %v customer %+v carrier %+v", v, cu, ca)
					return
				}
				if v < last {
					t.Errorf("version went backwards: %v after %v", v, last)
					return
				}
				last = v
				reads.Add(1)
			}
		})
	}

	const rewrites = 100
	wantFailures := 0
	for i := range rewrites {
		v := i + 2
		if i%2 == 1 {
			writeFile(t, path, invalid(v))
			err := m.Reload()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Reload(invalid %d): got %v, want *ValidationError", v, err)
			}
			wantFailures++
		} else {
			writeFile(t, path, versioned(v))
			if err := m.Reload(); err != nil {
				t.Fatalf("Reload(valid %d): %v", v, err)
			}
		}
	}
	close(stop)
	wg.Wait()

	if got := m.Failures(); got != uint64(wantFailures) {
		t.Errorf("Failures: got %d, want %d", got, wantFailures)
	}
	for r, want := range map[string]int64{ReloadSuccess: rewrites - int64(wantFailures), ReloadFailure: int64(wantFailures)} {
		n, _ := results.Load(r)
		if got := n.(*atomic.Int64).Load(); got != want {
			t.Errorf("OnReload(%q): got %d calls, want %d", r, got, want)
		}
	}
	if got, want := changes.Load(), int64(rewrites-wantFailures); got != want {
		t.Errorf("OnChange: got %d calls, want %d", got, want)
	}
	// The last write (i = 99) was invalid: the one before it runs.
	if got, want := m.Current().Peers[0].CPS, float64(rewrites); got != want {
		t.Errorf("Current after the run: cps %v, want %v (last valid)", got, want)
	}
	if reads.Load() == 0 {
		t.Error("readers read nothing")
	}
}

func TestReloadNeedsRestart(t *testing.T) {
	m, path := newTestManager(t, versioned(1))
	var got []string
	m.OnChange(func(old, new *Config) { got = append(got, fmt.Sprint(old.Peers[0].CPS, "->", new.Peers[0].CPS)) })
	writeFile(t, path, "http: {listen: 127.0.0.1:9999}\nsip: {listen: [udp://127.0.0.1:5999]}\n"+versioned(7))
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	c := m.Current()
	if c.Peers[0].CPS != 7 {
		t.Errorf("cps: got %v, want 7 (applied at runtime)", c.Peers[0].CPS)
	}
	if c.HTTP.Listen != "127.0.0.1:9090" || !slices.Equal(c.SIP.Listen, Default().SIP.Listen) {
		t.Errorf("restart-only settings changed at runtime: http %q sip %q", c.HTTP.Listen, c.SIP.Listen)
	}
	if p, want := m.PendingRestart(), []string{"sip.listen", "http.listen"}; !slices.Equal(p, want) {
		t.Errorf("PendingRestart: got %q, want %q", p, want)
	}
	if c.Customer("acme") == nil || c.PeerByAddr(c.Peers[0].Sources[0].Addr()) == nil {
		t.Error("lookups broken on a snapshot that kept running values")
	}
	// Back to the running values: nothing pending any more.
	writeFile(t, path, versioned(8))
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if p := m.PendingRestart(); len(p) != 0 {
		t.Errorf("PendingRestart: got %q, want none", p)
	}
	if want := []string{"1->7", "7->8"}; !slices.Equal(got, want) {
		t.Errorf("OnChange: got %q, want %q", got, want)
	}
}

func TestReloadMissingFile(t *testing.T) {
	m, path := newTestManager(t, versioned(3))
	before := m.Current()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := m.Reload(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Reload: got %v, want fs.ErrNotExist", err)
	}
	if m.Current() != before || m.Failures() != 1 {
		t.Errorf("got current changed=%v failures=%d, want unchanged and 1", m.Current() != before, m.Failures())
	}
}

// logRecorder keeps the level and message of every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
	buf  bytes.Buffer
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Level.String()+" "+rec.Message)
	r.buf.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&r.buf, " %s=%v", a.Key, a.Value.Resolve())
		return true
	})
	r.buf.WriteString("\n")
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) records() ([]string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs), r.buf.String()
}

func TestInvalidFileLoggedOnce(t *testing.T) {
	rec := &logRecorder{}
	t.Setenv("CPSGUARD_HTTP_TOKEN", "tok-secret-789")
	m, path := newTestManager(t, versioned(1), WithLogger(slog.New(rec)))
	writeFile(t, path, invalid(2))
	for range 3 {
		if err := m.Reload(); err == nil {
			t.Fatal("Reload(invalid): got nil error")
		}
	}
	writeFile(t, path, versioned(2))
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	recs, text := rec.records()
	want := []string{
		"ERROR config reload failed; keeping the running configuration",
		"WARN config file still invalid; keeping the running configuration",
		"WARN config file still invalid; keeping the running configuration",
		"INFO config reloaded",
	}
	if !slices.Equal(recs, want) {
		t.Errorf("log records:\ngot  %q\nwant %q", recs, want)
	}
	if !strings.Contains(text, "max_wiat: unknown key") || !strings.Contains(text, "carriers[0].cps: must be > 0 (got -1)") {
		t.Errorf("the error record does not list every error:\n%s", text)
	}
	if strings.Contains(text, "tok-secret-789") {
		t.Errorf("logs leak the http token:\n%s", text)
	}
	if m.Failures() != 3 {
		t.Errorf("Failures: got %d, want 3", m.Failures())
	}
}

// TestWatchRenameReplace replaces the file by rename, as editors and
// Kubernetes do, and waits (bounded) for the watcher to load it; then does
// the same with an invalid file, which must be counted and not applied.
func TestWatchRenameReplace(t *testing.T) {
	m, path := newTestManager(t, versioned(1), WithDebounce(20*time.Millisecond))
	changed := make(chan float64, 16)
	m.OnChange(func(_, new *Config) { changed <- new.Peers[0].CPS })
	failed := make(chan struct{}, 16)
	m.OnReload(func(r string) {
		if r == ReloadFailure {
			failed <- struct{}{}
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	}()

	// The watch may not be set up yet when we first replace the file: keep
	// replacing (with changing whitespace, so the content differs) until
	// the watcher reports, for at most 10 s.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		replaceByRename(t, path, versioned(5)+strings.Repeat("\n", i))
		select {
		case v := <-changed:
			if v != 5 {
				t.Fatalf("watcher loaded cps %v, want 5", v)
			}
		case <-tick.C:
			continue
		case <-deadline:
			t.Fatal("watcher did not notice a rename-replace within 10s")
		}
		break
	}

	replaceByRename(t, path, invalid(6))
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher did not report the invalid file within 10s")
	}
	if got := m.Current().Peers[0].CPS; got != 5 {
		t.Errorf("after an invalid file: cps %v, want 5 (last good)", got)
	}
	if m.Failures() != 1 {
		t.Errorf("Failures: got %d, want 1", m.Failures())
	}
}

// TestWatchConfigMapSwap mimics a Kubernetes ConfigMap volume: the file is a
// symlink through "..data", and an update atomically renames a new "..data"
// symlink pointing at a new directory. The file itself never changes.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mkVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "cpsguard.yaml"), content)
	}
	mkVersion("..v1", versioned(1))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cpsguard.yaml")
	if err := os.Symlink(filepath.Join("..data", "cpsguard.yaml"), path); err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(path, WithDebounce(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan float64, 16)
	m.OnChange(func(_, new *Config) { changed <- new.Peers[0].CPS })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()

	// As in TestWatchRenameReplace, repeat the swap (to a new version each
	// time) until the watcher, which may not be set up yet, reports.
	deadline := time.After(10 * time.Second)
	for i := 2; ; i++ {
		name := fmt.Sprintf("..v%d", i)
		mkVersion(name, versioned(i))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-changed:
			if v < 2 {
				t.Fatalf("watcher loaded cps %v, want a swapped-in version", v)
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("watcher did not notice a ConfigMap-style swap within 10s")
		}
	}
}

// A file larger than MaxFileSize is refused before it is parsed: a log or
// a dump written to the configuration's path by mistake must not cost the
// running node (viper holds some ten times a file's size while it parses,
// seventy times for real peers) nor, at start, let it begin on it; the
// last good configuration keeps running. So is a path that never ends
// (/dev/zero).
func TestFileLargerThanMaxRefused(t *testing.T) {
	huge := versioned(4) + "#" + strings.Repeat("x", MaxFileSize) + "\n"
	path := filepath.Join(t.TempDir(), "cpsguard.yaml")
	writeFile(t, path, huge)
	for name, load := range map[string]func(string) error{
		"Load":       func(p string) error { _, err := Load(p); return err },
		"NewManager": func(p string) error { _, err := NewManager(p); return err },
		"HTTPListen": func(p string) error { _, err := HTTPListen(p); return err },
	} {
		for _, p := range []string{path, "/dev/zero"} {
			if err := load(p); err == nil || !strings.Contains(err.Error(), "larger than") {
				t.Errorf("%s(%s): got %v, want an error saying the file is too large", name, p, err)
			}
		}
	}

	m, path := newTestManager(t, versioned(3))
	before := m.Current()
	writeFile(t, path, huge)
	if err := m.Reload(); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Reload: got %v, want an error saying the file is too large", err)
	}
	if m.Current() != before || m.Failures() != 1 {
		t.Errorf("got current changed=%v failures=%d, want unchanged and 1", m.Current() != before, m.Failures())
	}
	// Exactly MaxFileSize is still read.
	ok := versioned(5)
	ok += "#" + strings.Repeat("x", MaxFileSize-len(ok)-2) + "\n"
	writeFile(t, path, ok)
	if err := m.Reload(); err != nil {
		t.Fatalf("Reload of a file of exactly MaxFileSize bytes: %v", err)
	}
}

// A reload that turns log.level down to info is logged at info: the line
// comes after the observers, one of which applies the level (h55: it was
// checked against the old level, warn, and never written).
func TestReloadLoggedAtTheNewLevel(t *testing.T) {
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	m, path := newTestManager(t, "log: {level: warn}\n"+versioned(1),
		WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))))
	m.OnChange(func(_, next *Config) {
		if next.Log.Level == "info" {
			level.Set(slog.LevelInfo)
		}
	})
	writeFile(t, path, "log: {level: info}\n"+versioned(2))
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "config reloaded") {
		t.Errorf("no \"config reloaded\" line after a reload to info:\n%s", buf.String())
	}
}
