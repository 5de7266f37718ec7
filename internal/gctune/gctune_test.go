package gctune

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// restore puts the process's GC settings back after a test changes them.
func restore(t *testing.T) {
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestApplyDefaults(t *testing.T) {
	restore(t)
	debug.SetMemoryLimit(math.MaxInt64)
	s := apply(env(nil), func() (int64, bool) { return 1 << 30, true })
	if s.GCPercent != DefaultGCPercent || s.GCSource != "default" {
		t.Errorf("gc = %d from %s, want %d from default", s.GCPercent, s.GCSource, DefaultGCPercent)
	}
	if got := debug.SetGCPercent(DefaultGCPercent); got != DefaultGCPercent {
		t.Errorf("runtime GC percent = %d, want %d", got, DefaultGCPercent)
	}
	giB := int64(1 << 30)
	want := int64(float64(giB) * limitShare)
	if s.MemoryLimit != want || s.LimitSource != "cgroup" || debug.SetMemoryLimit(-1) != want {
		t.Errorf("limit = %d from %s (runtime %d), want %d from cgroup", s.MemoryLimit, s.LimitSource, debug.SetMemoryLimit(-1), want)
	}
}

func TestApplyKeepsOperatorSettings(t *testing.T) {
	restore(t)
	debug.SetGCPercent(150) // as the runtime does for GOGC=150
	debug.SetMemoryLimit(512 << 20)
	s := apply(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "512MiB"}), func() (int64, bool) { return 1 << 30, true })
	if s.GCPercent != 150 || s.GCSource != "GOGC" || debug.SetGCPercent(150) != 150 {
		t.Errorf("gc = %d from %s, want the operator's 150", s.GCPercent, s.GCSource)
	}
	if s.MemoryLimit != 512<<20 || s.LimitSource != "GOMEMLIMIT" || debug.SetMemoryLimit(-1) != 512<<20 {
		t.Errorf("limit = %d from %s, want the operator's 512 MiB", s.MemoryLimit, s.LimitSource)
	}
}

func TestApplyWithoutCgroupLimit(t *testing.T) {
	restore(t)
	debug.SetMemoryLimit(math.MaxInt64)
	s := apply(env(nil), func() (int64, bool) { return 0, false })
	if s.LimitSource != "none" || s.MemoryLimit != math.MaxInt64 {
		t.Errorf("limit = %d from %s, want none", s.MemoryLimit, s.LimitSource)
	}
}

func TestLimitOf(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want int64
		ok   bool
	}{
		{1 << 30, 1 << 30, true},
		{9223372036854771712, 0, false}, // cgroup v1 "unlimited"
		{0, 0, false},
	} {
		if got, ok := limitOf(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("limitOf(%d) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// ownCgroupDir is the test's oracle: the directory of this process's own
// memory cgroup, from /proc/self/cgroup and the cgroup mounts (the memory
// controller of v1, else the unified v2 group), its mount point, and the
// name of the limit file there.
func ownCgroupDir(t *testing.T) (dir, mountPoint, file string) {
	t.Helper()
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc/self/cgroup: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	mountOf := func(fstype, opt string) (root, point string) {
		for _, line := range strings.Split(string(mounts), "\n") {
			pre, post, ok := strings.Cut(line, " - ")
			f, g := strings.Fields(pre), strings.Fields(post)
			if !ok || len(f) < 5 || len(g) < 3 || g[0] != fstype {
				continue
			}
			if opt == "" || slices.Contains(strings.Split(g[2], ","), opt) {
				return f[3], f[4]
			}
		}
		return "", ""
	}
	var v2path string
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			if root, point := mountOf("cgroup", "memory"); point != "" {
				rel, _ := filepath.Rel(root, parts[2])
				return filepath.Join(point, rel), point, "memory.limit_in_bytes"
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2path = parts[2]
		}
	}
	if root, point := mountOf("cgroup2", ""); point != "" && v2path != "" {
		rel, _ := filepath.Rel(root, v2path)
		return filepath.Join(point, rel), point, "memory.max"
	}
	t.Skip("this process is in no memory cgroup")
	return "", "", ""
}

// ownCgroupLimit is the lowest limit from the process's cgroup directory up
// to the mount point.
func ownCgroupLimit(t *testing.T) (int64, bool) {
	dir, stop, file := ownCgroupDir(t)
	best, found := int64(0), false
	for {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
			if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				if l, ok := limitOf(v); ok && (!found || l < best) {
					best, found = l, true
				}
			}
		}
		if dir == stop || !strings.HasPrefix(dir, stop) {
			return best, found
		}
		dir = filepath.Dir(dir)
	}
}

// The limit is the one of this process's own cgroup (a container's or a
// systemd unit's), not of the cgroup tree's root.
func TestCgroupLimitIsTheProcesssOwn(t *testing.T) {
	want, wantOK := ownCgroupLimit(t)
	got, ok := cgroupLimit()
	if got != want || ok != wantOK {
		t.Errorf("cgroupLimit() = %d, %v; this process's cgroup says %d, %v", got, ok, want, wantOK)
	}
}

// childLimitEnv carries the limit the child of TestLimitOfALimitedCgroup
// must find.
const childLimitEnv = "GCTUNE_TEST_CHILD_LIMIT"

// TestLimitOfALimitedCgroup gives this process's own cgroup a 1 GiB limit,
// as systemd's MemoryMax= or a container's limit does, in a private mount
// namespace (a file bind-mounted over the group's directory: nothing
// outside the namespace changes), and runs the test binary there: the soft
// limit must be 90 % of it. Reading only the cgroup root's file, as gctune
// did, found none outside a container. Needs root and unshare(1).
func TestLimitOfALimitedCgroup(t *testing.T) {
	if os.Getenv(childLimitEnv) != "" {
		t.Skip("the child runs TestCgroupLimitChild only")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) for a private mount namespace")
	}
	dir, _, _ := ownCgroupDir(t)
	fake := t.TempDir()
	const limit = 1 << 30
	for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
		if err := os.WriteFile(filepath.Join(fake, f), []byte(strconv.Itoa(limit)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" "$2" && exec "$3" -test.run '^TestCgroupLimitChild$' -test.v`,
		"sh", fake, dir, os.Args[0])
	cmd.Env = append(os.Environ(), childLimitEnv+"="+strconv.Itoa(limit), "GOMEMLIMIT=", "GOGC=")
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "mount: ") && err != nil {
		t.Skipf("cannot bind-mount in a private namespace here: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCgroupLimitChild") {
		t.Errorf("child in a 1 GiB cgroup: %v\n%s", err, out)
	}
}

// TestCgroupLimitChild runs inside TestLimitOfALimitedCgroup's namespace.
func TestCgroupLimitChild(t *testing.T) {
	want, err := strconv.ParseInt(os.Getenv(childLimitEnv), 10, 64)
	if err != nil {
		t.Skip("run by TestLimitOfALimitedCgroup")
	}
	restore(t)
	debug.SetMemoryLimit(math.MaxInt64)
	if got, ok := cgroupLimit(); got != want || !ok {
		t.Fatalf("cgroupLimit() = %d, %v; want %d", got, ok, want)
	}
	s := apply(os.Getenv, cgroupLimit)
	if wantSoft := int64(float64(want) * limitShare); s.LimitSource != "cgroup" || s.MemoryLimit != wantSoft || debug.SetMemoryLimit(-1) != wantSoft {
		t.Errorf("apply: limit %d from %s, want %d from cgroup", s.MemoryLimit, s.LimitSource, wantSoft)
	}
}
