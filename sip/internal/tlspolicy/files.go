package tlspolicy

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// checkEvery is how often, at most, a handshake looks at whether the
// TLS files changed.
const checkEvery = time.Second

// fileStamp is what tells a changed file: its size and modification time
// (os.Stat follows symbolic links, so a Kubernetes secret's swap of the
// link's target shows too).
type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func stampOf(file string) fileStamp {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
}

// fileCache keeps a value read from files and reads them again when one
// of them changes, looking at most once a checkEvery. Safe for
// concurrent use.
type fileCache[T any] struct {
	load func(files []string) (T, error)

	mu      sync.Mutex
	files   []string
	stamps  []fileStamp
	checked time.Time
	val     T
	ok      bool
}

// get returns the value of files, read again when files differ from the
// last call's or one of them changed. When they do not load, the last
// good value stays (loaded reports the error); err is set only when there
// never was one. loaded reports a new read (nil error) or a failed one.
func (c *fileCache[T]) get(files []string, now time.Time) (val T, loaded bool, loadErr, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	same := slices.Equal(files, c.files)
	if same && c.ok && now.Sub(c.checked) < checkEvery {
		return c.val, false, nil, nil
	}
	stamps := make([]fileStamp, len(files))
	for i, f := range files {
		stamps[i] = stampOf(f)
	}
	c.checked = now
	if same && slices.Equal(stamps, c.stamps) {
		if c.ok {
			return c.val, false, nil, nil
		}
		// Unchanged files that did not load: no new attempt, same error.
		var zero T
		return zero, false, nil, errors.New("sip: TLS files do not load (unchanged since)")
	}
	c.files, c.stamps = slices.Clone(files), stamps
	v, lerr := c.load(files)
	if lerr != nil {
		if c.ok {
			return c.val, true, lerr, nil
		}
		var zero T
		return zero, true, lerr, lerr
	}
	c.val, c.ok = v, true
	return v, true, nil, nil
}

// file reads one of sip.tls's files through its cache, and logs a new
// read or a failed one.
func file[T any](s *Policy, c *fileCache[T], what string, files ...string) (T, error) {
	v, loaded, loadErr, err := c.get(files, s.now())
	switch {
	case loadErr != nil && err == nil:
		s.log.Warn("sip.tls files changed but do not load; the last good ones stay in use", "what", what,
			"files", strings.Join(files, ","), "error", loadErr)
	case loadErr == nil && loaded:
		s.log.Info("sip.tls files read", "what", what, "files", strings.Join(files, ","))
	}
	return v, err
}
