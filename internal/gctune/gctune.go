package gctune

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the GC target Apply sets when GOGC is not in the
// environment.
const DefaultGCPercent = 400

// limitShare is the part of a cgroup memory limit used as the soft limit;
// the rest is headroom for the runtime's own and non-heap memory.
const limitShare = 0.9

// Settings reports what Apply did, for the start-up log.
type Settings struct {
	// GCPercent is the GC target in effect (-1 = off).
	GCPercent int
	// GCSource is "GOGC" when the environment set it, else "default".
	GCSource string
	// MemoryLimit is the soft memory limit in bytes in effect (math.MaxInt64
	// when none).
	MemoryLimit int64
	// LimitSource is "GOMEMLIMIT", "cgroup" (a share of the container's
	// limit) or "none".
	LimitSource string
}

// Apply sets the GC target and soft memory limit unless the environment
// already does, and reports the settings in effect.
func Apply() Settings {
	return apply(os.Getenv, cgroupLimit)
}

func apply(getenv func(string) string, cgroup func() (int64, bool)) Settings {
	var s Settings
	if getenv("GOGC") != "" {
		s.GCSource = "GOGC"
		s.GCPercent = debug.SetGCPercent(-1)
		debug.SetGCPercent(s.GCPercent)
	} else {
		s.GCSource = "default"
		s.GCPercent = DefaultGCPercent
		debug.SetGCPercent(DefaultGCPercent)
	}
	s.MemoryLimit = debug.SetMemoryLimit(-1) // read only
	switch {
	case getenv("GOMEMLIMIT") != "":
		s.LimitSource = "GOMEMLIMIT"
	default:
		s.LimitSource = "none"
		if limit, ok := cgroup(); ok {
			s.MemoryLimit = int64(float64(limit) * limitShare)
			s.LimitSource = "cgroup"
			debug.SetMemoryLimit(s.MemoryLimit)
		}
	}
	return s
}

// cgroupFiles are the memory limit files of cgroup v2 and v1, as seen from
// inside the container.
var cgroupFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// cgroupLimit returns this process's cgroup memory limit, if it has one.
func cgroupLimit() (int64, bool) {
	for _, f := range cgroupFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, ok := parseLimit(string(b)); ok {
			return v, true
		}
	}
	return 0, false
}

// parseLimit reads a cgroup memory limit: "max" (v2) and the near-2^63
// figure v1 reports for "unlimited" mean none.
func parseLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= 1<<60 {
		return 0, false
	}
	return v, true
}
