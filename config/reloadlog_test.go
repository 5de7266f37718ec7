package config

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// lockedBuffer is a bytes.Buffer safe for the watcher's goroutine and the
// test.
type lockedBuffer struct{ testlog.Buffer }

// reloaded returns the "config reloaded" records logged so far, decoded.
func (l *lockedBuffer) reloaded(t *testing.T) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "config reloaded" {
			out = append(out, rec)
		}
	}
	return out
}

func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// A reload logs what triggered it, the key paths that changed (a secret's
// path, never its value) and the new config hash.
func TestReloadLogsChanges(t *testing.T) {
	buf := &lockedBuffer{}
	m, path := newTestManager(t, versioned(1), WithLogger(slog.New(slog.NewJSONHandler(buf, nil))),
		WithDebounce(20*time.Millisecond))

	const secret = "dialog-secret-0123456789abcdef"
	writeFile(t, path, "sip: {dialog_secret: "+secret+"}\n"+versioned(2))
	if err := m.ReloadBy(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	// Same file again, through the API: nothing changed.
	if err := m.ReloadBy(TriggerAPI); err != nil {
		t.Fatal(err)
	}
	recs := buf.reloaded(t)
	if len(recs) != 2 {
		t.Fatalf("got %d config reloaded records, want 2:\n%s", len(recs), buf)
	}
	want := []string{"sip.dialog_secret", "peers[0].cps", "customers[0].cps", "carriers[0].cps"}
	if r := recs[0]; r["trigger"] != "sighup" || !slices.Equal(strs(r["changed"]), want) || r["config_hash"] != m.Current().Hash() {
		t.Errorf("first reload: trigger %v changed %v hash %v; want sighup, %v, %s", r["trigger"], r["changed"], r["config_hash"], want, m.Current().Hash())
	}
	if r := recs[1]; r["trigger"] != "api" || r["changed"] == nil || len(strs(r["changed"])) != 0 {
		t.Errorf("second reload: trigger %v changed %v; want api and []", r["trigger"], r["changed"])
	}
	if strings.Contains(buf.String(), secret) {
		t.Errorf("the log leaks the dialog secret:\n%s", buf)
	}

	// A change seen by Watch says "file".
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; len(buf.reloaded(t)) < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("watcher did not reload within 10s:\n%s", buf)
		}
		writeFile(t, path, "sip: {dialog_secret: "+secret+"}\n"+versioned(3)+strings.Repeat("\n", i))
		time.Sleep(100 * time.Millisecond)
	}
	if r := buf.reloaded(t)[2]; r["trigger"] != "file" || !slices.Contains(strs(r["changed"]), "peers[0].cps") {
		t.Errorf("watched reload: trigger %v changed %v; want file and peers[0].cps", r["trigger"], r["changed"])
	}
}

// A failed reload says what triggered it too.
func TestReloadFailureNamesTrigger(t *testing.T) {
	buf := &lockedBuffer{}
	m, path := newTestManager(t, versioned(1), WithLogger(slog.New(slog.NewJSONHandler(buf, nil))))
	writeFile(t, path, invalid(2))
	if err := m.ReloadBy(TriggerSIGHUP); err == nil {
		t.Fatal("Reload(invalid): got nil")
	}
	if !strings.Contains(buf.String(), `"msg":"config reload failed; keeping the running configuration","trigger":"sighup"`) {
		t.Errorf("failure record lacks the trigger:\n%s", buf)
	}
	// Each error after its place in the file, as cpsguard check prints it.
	if want := path + `:7:50: carriers[0].cps: must be > 0`; !strings.Contains(buf.String(), want) {
		t.Errorf("failure record's errors have no %s place:\n%s", want, buf)
	}
}

func TestChanged(t *testing.T) {
	a, err := Parse([]byte(versioned(1)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte("store: {redis: {addrs: [127.0.0.1:6379], password: pw-0123}}\nhttp: {token: tok-0123}\n" +
		strings.Replace(versioned(1), "routes:\n  default: [carrier-a]", "routes:\n  default: [carrier-a]\n  premium: [carrier-a]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	b.Peers = append(slices.Clone(b.Peers), Peer{Name: "dialer-2"})
	want := []string{"store.redis", "http.token", "peers[1]", "routes.premium"}
	if got := Changed(a, b); !slices.Equal(got, want) {
		t.Errorf("Changed: got %q, want %q", got, want)
	}
	if got := Changed(a, a); got != nil {
		t.Errorf("Changed(a, a): got %q, want nil", got)
	}
}

// Every RestartOnly entry names a setting, and a change of each is held
// back by a reload: sip.call_refresh_ttl and sip.max_call_duration are read
// once at start by the call tracker, and store.redis.tls by the Redis
// client, so a reload that claimed to apply them would not tell the truth.
func TestRestartOnlyPaths(t *testing.T) {
	v := reflectConfig(Default())
	for _, p := range RestartOnly {
		if _, ok := settingAt(v, p); !ok {
			t.Errorf("RestartOnly %q names no setting", p)
		}
	}
	running, err := Parse([]byte("store: {redis: {addrs: [127.0.0.1:6379]}}\n" + versioned(1)))
	if err != nil {
		t.Fatal(err)
	}
	next, err := Parse([]byte("sip: {call_refresh_ttl: 30s, max_call_duration: 1h}\n" +
		"store: {redis: {addrs: [127.0.0.1:6379], tls: {enabled: true}}}\n" + versioned(1)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sip.max_call_duration", "sip.call_refresh_ttl", "store.redis.tls.enabled"}
	if got := NeedsRestart(running, next); !slices.Equal(got, want) {
		t.Errorf("NeedsRestart: got %q, want %q", got, want)
	}
	kept := keepRunning(running, next)
	if got := Changed(running, kept); got != nil {
		t.Errorf("keepRunning left changes: %q", got)
	}
}

// The restart warning names the keys that changed, not the block they are
// in: a change of store.key_prefix said "store", and the operator had to
// diff the file to learn what waits for the restart. A block added or
// removed is named once; a secret by its key, never its value.
func TestRestartWarningNamesKeys(t *testing.T) {
	buf := &lockedBuffer{}
	running := "store: {key_prefix: a, redis: {addrs: [127.0.0.1:6379]}}\n" + versioned(1)
	m, path := newTestManager(t, running, WithLogger(slog.New(slog.NewJSONHandler(buf, nil))))
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"store: {key_prefix: b, redis: {addrs: [127.0.0.1:6379]}}\n", []string{"store.key_prefix"}},
		{"store: {key_prefix: a, on_error: reject, redis: {addrs: [127.0.0.1:6380], password: pw-not-logged}}\n",
			[]string{"store.redis.addrs", "store.redis.password", "store.on_error"}},
		{"store: {key_prefix: a}\nlog: {format: text}\nhttp: {listen: 127.0.0.1:9999}\n", []string{"store.redis", "http.listen", "log.format"}},
		{"node_id: other\nsip: {listen: [udp://127.0.0.1:5999], tcp: {idle_timeout: 5s}}\nstore: {key_prefix: a, redis: {addrs: [127.0.0.1:6379]}}\n",
			[]string{"node_id", "sip.listen", "sip.tcp.idle_timeout"}},
	} {
		buf.Reset()
		writeFile(t, path, tc.file+versioned(1))
		if err := m.Reload(); err != nil {
			t.Fatal(err)
		}
		if got := m.PendingRestart(); !slices.Equal(got, tc.want) {
			t.Errorf("%q: PendingRestart %q, want %q", tc.file, got, tc.want)
		}
		var warned []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] == "config settings changed but need a restart; the running values stay" {
				warned = strs(rec["settings"])
			}
		}
		if !slices.Equal(warned, tc.want) {
			t.Errorf("%q: the warning names %q, want %q", tc.file, warned, tc.want)
		}
		if strings.Contains(buf.String(), "pw-not-logged") {
			t.Errorf("the reload log shows the password:\n%s", buf.String())
		}
	}
}

func reflectConfig(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }

// sip.tcp.idle_timeout is read once, when the SIP stack is built (sipgo
// copies it into its TCP and TLS transports as their read and write
// timeouts): a reload that changed it changed nothing on the wire, yet
// reported no pending restart, so an operator who lowered it by reload to
// shed a slow-connection attack saw it accepted and in force in the file
// and in the API, and nothing happened. It is restart-only.
func TestIdleTimeoutNeedsRestart(t *testing.T) {
	running, err := Parse([]byte(versioned(1)))
	if err != nil {
		t.Fatal(err)
	}
	next, err := Parse([]byte("sip: {tcp: {idle_timeout: 5s}}\n" + versioned(1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := NeedsRestart(running, next); !slices.Contains(got, "sip.tcp.idle_timeout") {
		t.Errorf("NeedsRestart after a change of sip.tcp.idle_timeout: %q, want it listed", got)
	}
	if kept := keepRunning(running, next); kept.SIP.TCP.IdleTimeout != running.SIP.TCP.IdleTimeout {
		t.Errorf("a reload applied sip.tcp.idle_timeout %s; the running stack keeps %s", kept.SIP.TCP.IdleTimeout, running.SIP.TCP.IdleTimeout)
	}
}
