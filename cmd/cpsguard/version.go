package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3"
// (the Makefile does). Without it, the module version from the build info
// is used when there is one.
var version = "dev"

// commit is the source revision given at build time (-ldflags
// "-X main.commit=<sha>"), for builds without VCS stamping: the container
// build's context has no .git. Go's own vcs.revision wins when present.
var commit = ""

// buildInfo describes the running binary.
type buildInfo struct {
	Version, Commit, GoVersion string
}

func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, Commit: "unknown", GoVersion: runtime.Version()}
	if commit != "" {
		bi.Commit = commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return bi
	}
	if bi.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		bi.Version = info.Main.Version
	}
	if info.GoVersion != "" {
		bi.GoVersion = info.GoVersion
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		bi.Commit = rev
		if modified == "true" {
			bi.Commit += "-dirty"
		}
	}
	return bi
}

func runVersion(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: cpsguard version\n\n"+
			"Print the release (git describe), the commit and the Go version the\n"+
			"binary was built from; `cpsguard --version` prints the same.\n")
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cpsguard version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	bi := readBuildInfo()
	fmt.Printf("cpsguard %s\ncommit: %s\ngo: %s\n", bi.Version, bi.Commit, bi.GoVersion)
	return exitOK
}
