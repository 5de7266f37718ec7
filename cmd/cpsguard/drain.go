package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
)

func init() {
	commands["drain"] = command{runDrain, "take a node out of service: stop taking calls, wait for those in progress"}
}

// runDrain implements `cpsguard drain [--addr URL | --config FILE] [--token
// T] [--timeout D]`: POST /api/v1/drain to the node and wait until it says
// drained (exit exitOK) or --timeout passes (exitFail). The node refuses new
// calls with 503 from the first moment, lets the calls in progress finish
// within sip.drain_grace, then closes its SIP listeners and keeps serving
// its HTTP API (readyz 503) until it is stopped. A Kubernetes preStop hook
// runs it, so the pod has drained before the kubelet sends SIGTERM.
func runDrain(args []string) int {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	node := addNodeFlags(fs)
	token := addTokenFlag(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "give up waiting after this long (the drain goes on)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: cpsguard drain [--addr URL | --config FILE] [--token T] [--timeout D]\n\n"+
			"Takes the node out of service without stopping it: new calls get 503, calls\n"+
			"in progress have sip.drain_grace to finish, then its SIP listeners close.\n"+
			"Exits 0 once the node has drained, 1 on an error or after --timeout.\n"+
			"Stop the process afterwards (SIGTERM); a drained node takes no calls again.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cpsguard drain: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	base, err := node.url()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cpsguard drain: %v\n", err)
		return exitFail
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := httpapi.Drain(ctx, base, *token); err != nil {
		fmt.Fprintf(os.Stderr, "cpsguard drain: %s: %v\n", base, err)
		return exitFail
	}
	fmt.Printf("%s: drained\n", base)
	return exitOK
}
