package records

import (
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// settings are what a sink was opened with; a sink whose settings change
// on a reload is replaced.
type settings struct {
	file                  string
	maxSizeMB, maxBackups int
	syslog                string
	buffer                int
}

// output is where a sink writes: write takes one batch of records (each
// one JSON object and a newline), n records in all, and returns how many
// were lost.
type output interface {
	write(batch []byte, n int) (lost int, err error)
	close() error
}

// maxBatch bounds the bytes a sink writes at once.
const maxBatch = 64 << 10

// errorLogEvery spaces a sink's failure logs.
const errorLogEvery = time.Minute

// sink is one configured destination: a bounded queue and the goroutine
// that writes it.
type sink struct {
	name             string
	set              settings
	q                chan []byte
	out              output
	done             chan struct{}
	written, dropped prometheus.Counter
	log              *slog.Logger
	lastLog          time.Time
}

func newSink(name string, st settings, out output, o Options) *sink {
	s := &sink{
		name: name, set: st, out: out,
		q:       make(chan []byte, max(st.buffer, 1)),
		done:    make(chan struct{}),
		written: o.Written.WithLabelValues(name),
		dropped: o.Dropped.WithLabelValues(name),
		log:     o.Logger,
	}
	go s.run()
	return s
}

// offer queues one encoded record, or drops it when the queue is full.
func (s *sink) offer(b []byte) {
	select {
	case s.q <- b:
	default:
		s.dropped.Inc()
	}
}

// run writes the queue until it is closed, then closes the output. Records
// waiting in the queue are written in batches of up to maxBatch bytes.
func (s *sink) run() {
	defer close(s.done)
	defer func() {
		if err := s.out.close(); err != nil {
			s.log.Warn("call records: closing sink failed", "sink", s.name, "error", err)
		}
	}()
	var batch []byte
	for b := range s.q {
		batch = append(batch[:0], b...)
		batch = append(batch, '\n')
		n := 1
	more:
		for len(batch) < maxBatch {
			select {
			case b, ok := <-s.q:
				if !ok {
					break more
				}
				batch = append(batch, b...)
				batch = append(batch, '\n')
				n++
			default:
				break more
			}
		}
		s.flush(batch, n)
	}
}

func (s *sink) flush(batch []byte, n int) {
	lost, err := s.out.write(batch, n)
	lost = min(max(lost, 0), n)
	s.written.Add(float64(n - lost))
	s.dropped.Add(float64(lost))
	if err != nil && time.Since(s.lastLog) >= errorLogEvery {
		s.lastLog = time.Now()
		s.log.Warn("call records: sink cannot write; its records are dropped and counted (cpsguard_records_dropped_total)",
			"sink", s.name, "lost", lost, "error", err)
	}
}

// wait waits for the sink's goroutine to end, at most d; past it the
// goroutine goes on alone (a hung output) and its remaining records are
// lost.
func (s *sink) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.log.Warn("call records: sink did not finish writing in time", "sink", s.name)
	}
}

// streamOutput writes batches to an io.Writer (stdout).
type streamOutput struct{ w io.Writer }

func (o streamOutput) write(batch []byte, n int) (int, error) {
	if _, err := o.w.Write(batch); err != nil {
		return n, err
	}
	return 0, nil
}

func (streamOutput) close() error { return nil }
