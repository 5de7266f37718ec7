package httpapi

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/internal/lograte"
)

// refusalLogRate is how many refused API writes (401, 403) a node logs a
// second, with a burst of as many: enough for an operator's mistakes and a
// brute-force attempt's first lines, while a client that loops on a wrong
// token cannot fill the disk (h55: 5,000 refused requests in 1.2 s wrote
// 600 KB of warn lines). The lines over it are counted and the count is
// logged with the next line, or within a second.
const refusalLogRate = 10

// refusalLog writes the refused writes' warn lines, at most refusalLogRate
// a second. It is safe for concurrent use.
type refusalLog struct {
	lograte.Bucket
	// flushing is set while a flush of the suppressed count is due.
	flushing atomic.Bool
}

// warn logs msg for r at warn when the rate allows, with the count of
// the lines suppressed since the last one.
func (l *refusalLog) warn(log *slog.Logger, r *http.Request, msg string) {
	ok, n := l.Allow(time.Now(), refusalLogRate)
	if !ok {
		if l.flushing.CompareAndSwap(false, true) {
			// The count reaches the log even if no refused request
			// comes after the burst.
			time.AfterFunc(time.Second, func() { l.flushing.Store(false); l.flush(log) })
		}
		return
	}
	if n > 0 {
		logSuppressed(log, n)
	}
	log.Warn(msg, "remote", r.RemoteAddr)
}

// flush logs the count of the lines suppressed, if any.
func (l *refusalLog) flush(log *slog.Logger) {
	if n := l.Take(); n > 0 {
		logSuppressed(log, n)
	}
}

func logSuppressed(log *slog.Logger, n int64) {
	log.Warn("refused API writes not logged", "count", n, "reason", "more than "+strconv.Itoa(refusalLogRate)+" a second")
}
