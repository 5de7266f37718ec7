package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// semver is Semantic Versioning 2.0.0 with a leading v (the pattern of
// semver.org, shortened to what git describe produces).
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// TestVersionScript runs scripts/version.sh, which the Makefile stamps into
// the binary, in a scratch repository through a release's life: before the
// first tag, on a tag, after it, with uncommitted changes. Every answer is a
// semantic version.
func TestVersionScript(t *testing.T) {
	// git is a prerequisite of the README's quick start: with CI=true its
	// absence fails the test instead of skipping it.
	gitBin := redistest.Require(t, "git")
	repo := t.TempDir()
	script, err := os.ReadFile("../../scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "scripts", "version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() string {
		t.Helper()
		cmd := exec.Command("sh", filepath.Join(repo, "scripts", "version.sh"))
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("version.sh: %v\n%s", err, out)
		}
		v := strings.TrimSpace(string(out))
		if !semver.MatchString(v) {
			t.Errorf("version.sh = %q: not a semantic version", v)
		}
		return v
	}
	git("init", "-q")
	commit := func(msg string) string {
		if err := os.WriteFile(filepath.Join(repo, "f"), []byte(msg), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "f")
		git("commit", "-q", "-m", msg)
		return git("rev-parse", "--short", "HEAD")
	}
	h1 := commit("one")
	h2 := commit("two")
	if got, want := version(), "v0.0.0-2-g"+h2; got != want {
		t.Errorf("before any tag: %q, want %q", got, want)
	}
	_ = h1
	git("tag", "-a", "v1.2.3", "-m", "v1.2.3")
	git("tag", "nightly") // not a version tag: ignored
	if got := version(); got != "v1.2.3" {
		t.Errorf("on the tag: %q, want v1.2.3", got)
	}
	h3 := commit("three")
	if got, want := version(), "v1.2.3-1-g"+h3; got != want {
		t.Errorf("a commit after the tag: %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := version(), "v1.2.3-1-g"+h3+"-dirty"; got != want {
		t.Errorf("uncommitted changes: %q, want %q", got, want)
	}
}

// The binary reports the version it was stamped with, from `version` and
// from --version on the root command.
func TestVersionReportsStamp(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := cpsguard(t, nil, args...)
		first, _, _ := strings.Cut(r.stdout, "\n")
		if r.code != 0 || first != "cpsguard "+testVersion || !semver.MatchString(testVersion) {
			t.Errorf("cpsguard %v: exit %d, first line %q; want cpsguard %s", args, r.code, first, testVersion)
		}
	}
}

// TestCommitFromLdflags: a build without VCS stamping (a container build,
// whose context has no .git) reports the commit given with
// -ldflags "-X main.commit=…" instead of "unknown"; build_info's revision
// label comes from it.
func TestCommitFromLdflags(t *testing.T) {
	old := commit
	t.Cleanup(func() { commit = old })
	commit = "0123456789abcdef0123456789abcdef01234567"
	// A test binary carries no vcs.revision (go test does not stamp it).
	if got := readBuildInfo().Commit; got != commit {
		t.Errorf("Commit = %q, want the -X main.commit value %q", got, commit)
	}
	commit = ""
	if got := readBuildInfo().Commit; got != "unknown" {
		t.Errorf("Commit without either = %q, want unknown", got)
	}
}
