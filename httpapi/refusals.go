package httpapi

import (
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// refusalLogRate is how many refused API writes (401, 403) a node logs a
// second, with a burst of as many: enough for an operator's mistakes and a
// brute-force attempt's first lines, while a client that loops on a wrong
// token cannot fill the disk (h55: 5,000 refused requests in 1.2 s wrote
// 600 KB of warn lines). The lines over it are counted and the count is
// logged with the next line, or within a second.
const refusalLogRate = 10

// refusalLog writes the refused writes' warn lines, at most refusalLogRate
// a second (a token bucket). It is safe for concurrent use.
type refusalLog struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int64
	// flushing is set while a flush of the suppressed count is due.
	flushing bool
}

// warn logs msg for r at warn when the rate allows, with the count of
// the lines suppressed since the last one.
func (l *refusalLog) warn(log *slog.Logger, r *http.Request, msg string) {
	now := time.Now()
	l.mu.Lock()
	const rate = float64(refusalLogRate)
	if l.last.IsZero() {
		l.tokens = rate
	} else if d := now.Sub(l.last); d > 0 {
		l.tokens = min(rate, l.tokens+d.Seconds()*rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		if !l.flushing {
			// The count reaches the log even if no refused request
			// comes after the burst.
			l.flushing = true
			time.AfterFunc(time.Second, func() { l.flush(log) })
		}
		l.mu.Unlock()
		return
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		log.Warn("refused API writes not logged", "count", n, "reason", "more than 10 a second")
	}
	log.Warn(msg, "remote", r.RemoteAddr)
}

// flush logs the count of the lines suppressed, if any.
func (l *refusalLog) flush(log *slog.Logger) {
	l.mu.Lock()
	n := l.suppressed
	l.suppressed, l.flushing = 0, false
	l.mu.Unlock()
	if n > 0 {
		log.Warn("refused API writes not logged", "count", n, "reason", "more than 10 a second")
	}
}
