package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
)

func init() {
	commands["probe"] = command{runProbe, "exit 0 when a node is ready (/readyz), 1 otherwise: a container health check"}
}

// runProbe implements `cpsguard probe [--addr URL | --config FILE]
// [--timeout D]`: GET /readyz of the node, exit exitOK on 200 and exitFail
// on anything else (the reason on stderr), so a distroless image, which has
// no shell or curl, can have a HEALTHCHECK.
func runProbe(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	node := addNodeFlags(fs)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: cpsguard probe [--addr URL | --config FILE] [--timeout D]\n\n"+
			"Exits 0 when the node answers 200 on /readyz (its SIP listeners are up, its\n"+
			"store usable, it is not draining), 1 otherwise with the reason on stderr.\n"+
			"For a container HEALTHCHECK:\n"+
			"  HEALTHCHECK CMD [\"/usr/local/bin/cpsguard\", \"probe\", \"--config\", \"/etc/cpsguard/cpsguard.yaml\"]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cpsguard probe: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(os.Stderr, "cpsguard probe: --timeout must be > 0 (got %v)\n", *timeout)
		return exitUsage
	}
	base, err := node.url()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cpsguard probe: %v\n", err)
		return exitFail
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := httpapi.Probe(ctx, base); err != nil {
		var u *httpapi.Unreachable
		if errors.As(err, &u) {
			fmt.Fprintf(os.Stderr, "cpsguard probe: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "cpsguard probe: %s not ready: %v\n", base, err)
		}
		return exitFail
	}
	return exitOK
}
