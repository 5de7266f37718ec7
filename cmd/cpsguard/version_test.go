package main

import "testing"

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
