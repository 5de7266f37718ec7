package gctune

import (
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
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

// cgroupLimit returns the memory limit of this process's own cgroup, if
// it has one: automemlimit follows /proc/self/cgroup and mountinfo to the
// process's group (a container's, or a systemd unit's with MemoryMax=, as
// /sys/fs/cgroup/system.slice/cpsguard.service/memory.max) and takes the
// lowest limit on the way up, on cgroup v2, v1 and hybrids. Reading only
// /sys/fs/cgroup/memory.max, as before, saw the root group outside a
// container: no limit under systemd.
func cgroupLimit() (int64, bool) {
	v, err := memlimit.FromCgroup()
	if err != nil {
		return 0, false
	}
	return limitOf(v)
}

// limitOf turns a cgroup limit into a memory limit: 0 and the near-2^63
// figure cgroup v1 reports for "unlimited" mean none.
func limitOf(v uint64) (int64, bool) {
	if v == 0 || v >= 1<<60 {
		return 0, false
	}
	return int64(v), true
}
