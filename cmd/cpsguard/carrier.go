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
	commands["carrier"] = command{runCarrier, "act on a carrier for the pool (unpause)"}
}

// runCarrier implements `cpsguard carrier unpause NAME`: it talks to one
// node's operations API (found as nodeFlags.url says), which ends the
// carrier's Retry-After pause for the whole pool. Exit code exitOK,
// exitFail when the node refuses or cannot be reached, exitUsage on a
// usage error.
func runCarrier(args []string) int {
	return carrierMain(args, os.Stdout, os.Stderr)
}

func carrierUsage(w io.Writer) {
	fmt.Fprint(w, "usage:\n"+
		"  cpsguard carrier unpause NAME\n\n"+
		"unpause ends the carrier's Retry-After pause on every node of the pool\n"+
		"at once: calls go to it again. It needs http.token (--token or\n"+
		"$CPSGUARD_HTTP_TOKEN); a node without one refuses every change. Common\n"+
		"flags: --addr, --config (find the node as `cpsguard status` does),\n"+
		"--token. `cpsguard status` shows the pauses in force.\n")
}

func carrierMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		carrierUsage(stderr)
		return exitUsage
	}
	sub := args[0]
	switch sub {
	case "unpause":
	case "help", "-h", "--help":
		carrierUsage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "cpsguard carrier: unknown subcommand %q\n\n", sub)
		carrierUsage(stderr)
		return exitUsage
	}
	fs := flag.NewFlagSet("carrier "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := addNodeFlags(fs)
	token := fs.String("token", os.Getenv("CPSGUARD_HTTP_TOKEN"), "bearer `token` (http.token; also $CPSGUARD_HTTP_TOKEN)")
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
	c, err := httpapi.Unpause(ctx, addr, *token, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "cpsguard carrier unpause: %v\n", err)
		return exitFail
	}
	_ = httpapi.RenderPauseChange(stdout, c)
	return exitOK
}
