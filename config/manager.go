package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload results passed to OnReload observers; they are the values of the
// result label of cpsguard_config_reloads_total.
const (
	ReloadSuccess = "success"
	ReloadFailure = "failure"
)

// RestartOnly lists the settings a running process cannot change: a reload
// keeps their running value and reports the difference (see
// Manager.PendingRestart). Everything else (limits, peers, customers,
// carriers, routes, reject answer, shadow, log level, http.token,
// sip.dialog_secret, sip.drain_grace, …) takes effect at once. An entry
// names a setting or a whole block ("store"), by the path of the file; a
// change is reported by the keys that changed ("store.key_prefix").
var RestartOnly = []string{
	"node_id", "sip.listen", "sip.advertise",
	// The call tracker is built at start with these two.
	"sip.max_call_duration", "sip.call_refresh_ttl",
	// sipgo's TCP and TLS transports copy it at start (read and write
	// timeouts).
	"sip.tcp.idle_timeout",
	"store", "http.listen", "log.format",
}

// NeedsRestart returns the keys under RestartOnly settings whose value
// differs between running and next, in RestartOnly order and named as
// Changed names them: a change of store.key_prefix is "store.key_prefix",
// not the whole "store" block, so the operator knows what waits.
func NeedsRestart(running, next *Config) []string {
	var out []string
	a, b := reflect.ValueOf(running).Elem(), reflect.ValueOf(next).Elem()
	for _, path := range RestartOnly {
		x, okx := settingAt(a, path)
		y, oky := settingAt(b, path)
		if okx && oky {
			diff(&out, path, x, y)
		}
	}
	return out
}

// keepRunning returns a copy of next whose RestartOnly settings are those of
// running.
func keepRunning(running, next *Config) *Config {
	out := *next
	a, b := reflect.ValueOf(running).Elem(), reflect.ValueOf(&out).Elem()
	for _, path := range RestartOnly {
		x, okx := settingAt(a, path)
		y, oky := settingAt(b, path)
		if okx && oky {
			y.Set(x)
		}
	}
	return &out // the index only covers peers, customers and carriers: still valid
}

// settingAt returns the field at path (cfg tags joined with ".") inside the
// struct v, through struct values only (a pointer on the way would share
// its target between two snapshots). TestRestartOnlyPaths checks every
// RestartOnly entry resolves.
func settingAt(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		f, ok := fieldByTag(v, name)
		if !ok {
			return reflect.Value{}, false
		}
		v = f
	}
	return v, true
}

// Reload triggers: what made a Manager reload, in its log lines.
const (
	TriggerSIGHUP = "sighup" // the process got SIGHUP (systemctl reload)
	TriggerFile   = "file"   // Watch saw the file change
	TriggerAPI    = "api"    // POST /api/v1/reload
)

// Manager owns the running configuration of a process: it loads the file,
// hands out the current immutable snapshot, and reloads it on demand
// (Reload) or when the file changes (Watch). A failed reload keeps the last
// good snapshot.
//
// A Manager is safe for concurrent use. Reloads are serialised; Current is a
// single atomic load and never blocks.
type Manager struct {
	path     string
	debounce time.Duration

	cur    atomic.Pointer[Config]
	logger atomic.Pointer[slog.Logger]

	failures atomic.Uint64
	pending  atomic.Pointer[[]string] // RestartOnly settings waiting for a restart

	mu       sync.Mutex // serialises reloads; guards the fields below
	lastSum  [32]byte   // content of the last file read, valid or not
	badSum   [32]byte   // content of the last invalid file logged
	onChange []func(old, new *Config)
	onReload []func(result string)
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger for reload and watch events (default: discard).
// It can be changed later with SetLogger.
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.SetLogger(l) } }

// WithDebounce sets how long Watch waits after the last file-system event
// before reloading (default 250ms), so an editor's burst of writes and
// renames gives one reload.
func WithDebounce(d time.Duration) Option { return func(m *Manager) { m.debounce = d } }

// NewManager loads the file at path and returns a Manager holding it. It
// fails, with the error of Load, when the file cannot be read or is invalid:
// a process must not start on a bad configuration.
func NewManager(path string, opts ...Option) (*Manager, error) {
	m := &Manager{path: path, debounce: 250 * time.Millisecond}
	m.SetLogger(slog.New(slog.DiscardHandler))
	for _, o := range opts {
		o(m)
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseFile(path, data)
	if err != nil {
		return nil, err
	}
	m.lastSum = sha256.Sum256(data)
	m.cur.Store(c)
	return m, nil
}

func parseFile(path string, data []byte) (*Config, error) {
	c, err := Parse(data)
	var ve *ValidationError
	if errors.As(err, &ve) {
		ve.File = path
	}
	return c, err
}

// Path is the configuration file's path.
func (m *Manager) Path() string { return m.path }

// Current returns the running configuration. It is never nil and must not
// be modified. Call it once per unit of work (per SIP call) and use that
// snapshot throughout, so one call never mixes two configurations.
func (m *Manager) Current() *Config { return m.cur.Load() }

// SetLogger replaces the logger, e.g. once the configuration has said which
// format to log in.
func (m *Manager) SetLogger(l *slog.Logger) { m.logger.Store(l) }

func (m *Manager) log() *slog.Logger { return m.logger.Load() }

// Failures is the number of failed reloads since the Manager was created.
func (m *Manager) Failures() uint64 { return m.failures.Load() }

// PendingRestart lists the keys under RestartOnly settings whose value in the file (as
// of the last successful reload) differs from the running one. Empty when
// nothing waits for a restart.
func (m *Manager) PendingRestart() []string {
	if p := m.pending.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// OnChange registers fn, called after every successful reload with the
// previous and the new snapshot (which may be equal when the file did not
// change). Observers run synchronously, in registration order, one reload
// at a time; they must not call Reload (it would deadlock) and should be
// quick. Current and PendingRestart are safe to call from them.
func (m *Manager) OnChange(fn func(old, new *Config)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = append(m.onChange, fn)
}

// OnReload registers fn, called after every reload attempt with
// ReloadSuccess or ReloadFailure, e.g. to count
// cpsguard_config_reloads_total{result}. Same rules as OnChange.
func (m *Manager) OnReload(fn func(result string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onReload = append(m.onReload, fn)
}

// Reload is ReloadBy(TriggerAPI), the form handed to the HTTP API.
func (m *Manager) Reload() error { return m.ReloadBy(TriggerAPI) }

// ReloadBy reads the file again, validates it and, if valid, makes it the
// current configuration; trigger (TriggerSIGHUP, TriggerFile, TriggerAPI)
// says in the log what asked for it. A successful reload logs the settings
// that changed (their key paths, never a value) and the new config hash.
// On failure the current configuration stays, the failure is counted and
// logged (the full error list only the first time a given invalid content
// is seen) and returned: a *ValidationError for an invalid file, a wrapped
// os error for an unreadable one.
//
// RestartOnly settings keep their running value; if the file changes them,
// they are logged at Warn and listed by PendingRestart.
func (m *Manager) ReloadBy(trigger string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reload(trigger, false)
}

// reload does the work of Reload with m.mu held. With onlyIfChanged, a file
// whose content is the one last read is left alone (Watch sees events for
// other files of the directory, chmods, symlink swaps to equal content), and
// a missing file is ignored: a rename-replace may be half done and the next
// event will bring the new file.
func (m *Manager) reload(trigger string, onlyIfChanged bool) error {
	data, err := readFile(m.path)
	if err != nil {
		if onlyIfChanged && errors.Is(err, fs.ErrNotExist) {
			m.log().Debug("config file missing, waiting for it to reappear", "file", m.path)
			return nil
		}
		m.fail(trigger, err, [32]byte{})
		return err
	}
	sum := sha256.Sum256(data)
	if onlyIfChanged && sum == m.lastSum {
		return nil
	}
	m.lastSum = sum
	next, err := parseFile(m.path, data)
	if err != nil {
		m.fail(trigger, err, sum)
		return err
	}
	m.badSum = [32]byte{}
	old := m.cur.Load()
	pending := NeedsRestart(old, next)
	m.pending.Store(&pending)
	if len(pending) > 0 {
		next = keepRunning(old, next)
		m.log().Warn("config settings changed but need a restart; the running values stay",
			"trigger", trigger, "file", m.path, "settings", pending)
	}
	changed := Changed(old, next)
	if changed == nil {
		changed = []string{} // logged as [], not null
	}
	m.cur.Store(next)
	for _, fn := range m.onChange {
		fn(old, next)
	}
	// After the observers: one of them applies log.level, so a reload
	// that turns info on says so at the new level.
	m.log().Info("config reloaded", "trigger", trigger, "file", m.path,
		"config_hash", next.Hash(), "changed", changed, "config", next)
	m.notify(ReloadSuccess)
	return nil
}

// fail counts a failed reload and logs it: with every error the first time
// this content fails, briefly when the same bad content is reloaded again.
func (m *Manager) fail(trigger string, err error, sum [32]byte) {
	m.failures.Add(1)
	if sum == ([32]byte{}) || sum != m.badSum {
		m.badSum = sum
		var ve *ValidationError
		if errors.As(err, &ve) {
			m.log().Error("config reload failed; keeping the running configuration",
				"trigger", trigger, "file", m.path, "errors", ve.Placed())
		} else {
			m.log().Error("config reload failed; keeping the running configuration",
				"trigger", trigger, "file", m.path, "error", err.Error())
		}
	} else {
		m.log().Warn("config file still invalid; keeping the running configuration", "trigger", trigger, "file", m.path)
	}
	m.notify(ReloadFailure)
}

func (m *Manager) notify(result string) {
	for _, fn := range m.onReload {
		fn(result)
	}
}

// Watch reloads the configuration when its file changes, until ctx is done;
// it then returns nil. It watches the file's directory, not the file, so it
// keeps working when the file is replaced by a rename (editors, Kubernetes
// ConfigMap symlink swaps) or deleted and recreated. Events are debounced and
// a reload happens only if the content changed. Failed reloads behave as in
// Reload. Watch returns an error only if the watch cannot be set up.
func (m *Manager) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(m.path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("config: watch %s: %w", dir, err)
	}
	m.log().Debug("watching config directory", "dir", dir, "file", m.path)

	// Go >= 1.23 timers: Stop and Reset never leave a stale tick in timer.C.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			timer.Reset(m.debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			m.log().Warn("config watch error", "dir", dir, "error", err.Error())
			timer.Reset(m.debounce) // events may have been lost: look at the file
		case <-timer.C:
			m.mu.Lock()
			_ = m.reload(TriggerFile, true) // logged and counted inside
			m.mu.Unlock()
		}
	}
}
