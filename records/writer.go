package records

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpsguard/cpsguard/config"
)

// Sink names: the sink label of the records metrics.
const (
	SinkFile   = "file"
	SinkStdout = "stdout"
	SinkSyslog = "syslog"
)

// closeWait bounds how long closing a sink waits for it to write what its
// queue holds (a reload, Close).
const closeWait = 5 * time.Second

// Options configure a Writer.
type Options struct {
	// Written and Dropped count records per sink (label "sink"); nil:
	// private counters.
	Written, Dropped *prometheus.CounterVec
	// Logger receives sink failures (at most one a minute per sink);
	// nil: discarded.
	Logger *slog.Logger
	// Stdout is the stdout sink's writer; nil: os.Stdout.
	Stdout io.Writer
	// Hostname is the syslog HOSTNAME; "": os.Hostname.
	Hostname string
}

// Writer writes call records to the configured sinks. See the package
// documentation for how it fails.
type Writer struct {
	o Options

	// mu: Write holds it shared while it offers a record to the sinks;
	// Apply and Close hold it to change them (a sink's queue is closed
	// only under it, so Write never sends on a closed queue).
	mu     sync.RWMutex
	sinks  map[string]*sink
	closed bool
}

// New returns a Writer with no sink; Apply opens the configured ones.
func New(o Options) *Writer {
	if o.Written == nil {
		o.Written = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "records_written_total"}, []string{"sink"})
	}
	if o.Dropped == nil {
		o.Dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "records_dropped_total"}, []string{"sink"})
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	return &Writer{o: o, sinks: map[string]*sink{}}
}

// Enabled reports whether any sink is open: the caller may skip building
// records when none is.
func (w *Writer) Enabled() bool {
	if w == nil {
		return false
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	return len(w.sinks) > 0
}

// Write encodes r once and offers it to every sink without waiting: a
// sink whose queue is full drops it (counted). A nil Writer, or one with
// no sink, does nothing.
func (w *Writer) Write(r *Record) {
	if w == nil {
		return
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if len(w.sinks) == 0 {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		// A Record holds strings, numbers and times: this cannot happen.
		for name := range w.sinks {
			w.o.Dropped.WithLabelValues(name).Inc()
		}
		return
	}
	for _, s := range w.sinks {
		s.offer(b)
	}
}

// Apply makes the sinks follow rc: sinks no longer configured, or whose
// settings changed, are closed (after writing what they hold); new ones
// are opened. It returns the first error opening a sink (that sink stays
// closed; the others are applied) — a file that cannot be created, a
// syslog address that does not resolve.
func (w *Writer) Apply(rc config.Records) error {
	want := map[string]settings{}
	if rc.File != "" {
		want[SinkFile] = settings{file: rc.File, maxSizeMB: rc.MaxSizeMB, maxBackups: rc.MaxBackups, buffer: rc.Buffer}
	}
	if rc.Stdout {
		want[SinkStdout] = settings{buffer: rc.Buffer}
	}
	if rc.Syslog != "" {
		want[SinkSyslog] = settings{syslog: rc.Syslog, buffer: rc.Buffer}
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	var stale []*sink
	for name, s := range w.sinks {
		if st, ok := want[name]; !ok || st != s.set {
			stale = append(stale, s)
			delete(w.sinks, name)
		}
	}
	var first error
	for name, st := range want {
		if _, ok := w.sinks[name]; ok {
			continue
		}
		out, err := w.open(name, st)
		if err != nil {
			w.o.Logger.Warn("call records: cannot open sink; its records are not written", "sink", name, "error", err)
			if first == nil {
				first = err
			}
			continue
		}
		w.sinks[name] = newSink(name, st, out, w.o)
	}
	for _, s := range stale {
		close(s.q)
	}
	w.mu.Unlock()
	for _, s := range stale {
		s.wait(closeWait)
	}
	return first
}

// open builds the output of sink name.
func (w *Writer) open(name string, st settings) (output, error) {
	switch name {
	case SinkFile:
		return openFile(st.file, st.maxSizeMB, st.maxBackups)
	case SinkStdout:
		return streamOutput{w: w.o.Stdout}, nil
	default:
		return newSyslog(st.syslog, w.o.Hostname)
	}
}

// Close writes what the queues hold (within a bound per sink) and closes
// every sink. Records written after Close are dropped silently.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	sinks := w.sinks
	w.sinks = map[string]*sink{}
	for _, s := range sinks {
		close(s.q)
	}
	w.mu.Unlock()
	for _, s := range sinks {
		s.wait(closeWait)
	}
}
