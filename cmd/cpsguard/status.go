package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
)

func init() {
	commands["status"] = command{runStatus, "show a node's limits, current calls and carrier queues"}
}

// runStatus implements `cpsguard status [--addr URL | --config FILE]
// [--watch]`: it prints the status table of the node once, or with --watch
// every second until SIGINT or SIGTERM, redrawn in place on a terminal and
// as plain tables one after another otherwise. The node is found as nodeFlags.url
// says. Exit code exitOK, exitFail when the node cannot be read, exitUsage
// on a usage error.
func runStatus(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	node := addNodeFlags(fs)
	watch := fs.Bool("watch", false, "refresh every second until interrupted (in place on a terminal, else one table after another)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: cpsguard status [--addr URL | --config FILE] [--watch]\n\n"+
			"Shows every peer, customer and carrier with its limit, the calls in its\n"+
			"current window (pool-wide on Redis), a burst's tokens left, the calls in\n"+
			"each extra window, live calls of max_calls, queued calls and wait.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cpsguard status: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	addr, err := node.url()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cpsguard status: %v\n", err)
		return exitFail
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *watch {
		// Screen codes only for a terminal: to a pipe or a file (a log,
		// `| tee`) the tables follow one another, plain.
		watchFn := httpapi.WatchPlain
		if isTerminal(os.Stdout) {
			watchFn = httpapi.Watch
		}
		if err := watchFn(ctx, os.Stdout, addr, time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "cpsguard status: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	if err := httpapi.PrintStatus(ctx, os.Stdout, addr); err != nil {
		fmt.Fprintf(os.Stderr, "cpsguard status: %v\n", err)
		return exitFail
	}
	return exitOK
}
