package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cpsguard/cpsguard/httpapi"
)

func init() {
	commands["carrier"] = command{runCarrier, "act on a carrier for the pool (out, in, unpause)"}
}

// runCarrier implements `cpsguard carrier out|in|unpause NAME`: it talks
// to one node's operations API (found as nodeFlags.url says), which takes
// the carrier out of service for the whole pool (out), puts it back (in),
// or ends its Retry-After pause (unpause). Exit code exitOK, exitFail
// when the node refuses or cannot be reached, exitUsage on a usage
// error.
func runCarrier(args []string) int {
	return carrierMain(args, os.Stdout, os.Stderr)
}

func carrierUsage(w io.Writer) {
	fmt.Fprint(w, "usage:\n"+
		"  cpsguard carrier out NAME [--reason TEXT]\n"+
		"  cpsguard carrier in NAME\n"+
		"  cpsguard carrier unpause NAME\n\n"+
		"out takes the carrier out of service on every node of the pool: calls\n"+
		"skip it until `carrier in` puts it back (its probes go on). unpause\n"+
		"ends the carrier's Retry-After pause on every node of the pool at\n"+
		"once: calls go to it again. Each needs http.token (--token or\n"+
		"$CPSGUARD_HTTP_TOKEN); a node without one refuses every change.\n"+
		"--addr and --config find the node as `cpsguard status` does.\n"+
		"`cpsguard status` shows the carriers out of service and the pauses in\n"+
		"force.\n")
}

// carrierSubs are carrier's subcommands, in the order its usage lists them.
var carrierSubs = []string{"out", "in", "unpause"}

// carrierFlags are the flags of `cpsguard carrier SUB`; reason is nil
// but for out.
type carrierFlags struct {
	fs            *flag.FlagSet
	node          *nodeFlags
	token, reason *string
}

func newCarrierFlags(sub string) carrierFlags {
	fs := flag.NewFlagSet("carrier "+sub, flag.ContinueOnError)
	f := carrierFlags{fs: fs, node: addNodeFlags(fs)}
	f.token = addTokenFlag(fs)
	if sub == "out" {
		f.reason = fs.String("reason", "", "why, shown in status and logs (`text`, at most 200 characters)")
	}
	return f
}

// carrierHelp is `cpsguard carrier -h`: the usage and every subcommand's
// flags.
func carrierHelp(w io.Writer) {
	carrierUsage(w)
	printGroupFlags(w, "carrier", carrierSubs, func(sub string) *flag.FlagSet { return newCarrierFlags(sub).fs })
}

func carrierMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		carrierUsage(stderr)
		return exitUsage
	}
	sub := args[0]
	switch sub {
	case "unpause", "out", "in":
	case "help", "-h", "-help", "--help":
		carrierHelp(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "cpsguard carrier: unknown subcommand %q\n\n", sub)
		carrierUsage(stderr)
		return exitUsage
	}
	f := newCarrierFlags(sub)
	fs, node, token, reason := f.fs, f.node, f.token, f.reason
	fs.SetOutput(stderr)
	fs.Usage = func() { carrierUsage(fs.Output()); fmt.Fprintln(fs.Output()); fs.PrintDefaults() }
	// Flags may come before or after the carrier's name.
	var pos []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "cpsguard carrier %s: want 1 argument (the carrier's name), got %d: %s\n", sub, len(pos), strings.Join(pos, " "))
		carrierUsage(stderr)
		return exitUsage
	}
	addr, err := node.url()
	if err != nil {
		fmt.Fprintf(stderr, "cpsguard carrier: %v\n", err)
		return exitFail
	}
	ctx, cancel := context.WithTimeout(context.Background(), limitTimeout)
	defer cancel()
	if sub != "unpause" {
		why := ""
		if reason != nil {
			why = *reason
		}
		c, err := httpapi.SetService(ctx, addr, *token, pos[0], sub == "out", why)
		if err != nil {
			fmt.Fprintf(stderr, "cpsguard carrier %s: %v\n", sub, err)
			return exitFail
		}
		_ = httpapi.RenderServiceChange(stdout, c)
		return exitOK
	}
	c, err := httpapi.Unpause(ctx, addr, *token, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "cpsguard carrier unpause: %v\n", err)
		return exitFail
	}
	_ = httpapi.RenderPauseChange(stdout, c)
	return exitOK
}
