package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/limits"
)

func init() {
	commands["limit"] = command{runLimit, "override a limit live for the pool (set, rm, ls)"}
}

// limitTimeout bounds one limit request.
const limitTimeout = 10 * time.Second

// runLimit implements `cpsguard limit set|rm|ls`: it talks to one node's
// operations API (found as nodeFlags.url says), which stores the override
// for the whole pool. Exit code exitOK, exitFail when the node refuses or
// cannot be reached, exitUsage on a usage error.
func runLimit(args []string) int {
	return limitMain(args, os.Stdout, os.Stderr)
}

func limitUsage(w io.Writer) {
	fmt.Fprint(w, "usage:\n"+
		"  cpsguard limit set {peer|customer|carrier} NAME --cps N --ttl DURATION [--burst N]\n"+
		"  cpsguard limit rm  {peer|customer|carrier} NAME\n"+
		"  cpsguard limit ls\n\n"+
		"Overrides one configured limit on every node of the pool until the TTL\n"+
		"ends or it is removed. set and rm need http.token: --token or\n"+
		"$CPSGUARD_HTTP_TOKEN. --addr and --config find the node as\n"+
		"`cpsguard status` does.\n")
}

// limitSubs are limit's subcommands, in the order its usage lists them.
var limitSubs = []string{"set", "rm", "ls"}

// limitFlags are the flags of `cpsguard limit SUB`; cps, ttl and burst
// are nil but for set.
type limitFlags struct {
	fs         *flag.FlagSet
	node       *nodeFlags
	token, ttl *string
	cps        *float64
	burst      *int
}

func newLimitFlags(sub string) limitFlags {
	fs := flag.NewFlagSet("limit "+sub, flag.ContinueOnError)
	f := limitFlags{fs: fs, node: addNodeFlags(fs)}
	f.token = addTokenFlag(fs)
	if sub == "set" {
		f.cps = fs.Float64("cps", 0, "calls per second for the pool (required)")
		f.ttl = fs.String("ttl", "", "how long the override lives, e.g. 30m, 1h, 7d (required; at most 30d)")
		f.burst = fs.Int("burst", -1, "token bucket capacity of a peer or customer (0: none; default: the configured one)")
	}
	return f
}

// limitHelp is `cpsguard limit -h`: the usage and every subcommand's
// flags.
func limitHelp(w io.Writer) {
	limitUsage(w)
	printGroupFlags(w, "limit", limitSubs, func(sub string) *flag.FlagSet { return newLimitFlags(sub).fs })
}

func limitMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		limitUsage(stderr)
		return exitUsage
	}
	sub := args[0]
	switch sub {
	case "set", "rm", "ls":
	case "help", "-h", "-help", "--help":
		limitHelp(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "cpsguard limit: unknown subcommand %q\n\n", sub)
		limitUsage(stderr)
		return exitUsage
	}
	f := newLimitFlags(sub)
	fs, node, token, cps, ttl, burst := f.fs, f.node, f.token, f.cps, f.ttl, f.burst
	fs.SetOutput(stderr)
	fs.Usage = func() { limitUsage(fs.Output()); fmt.Fprintln(fs.Output()); fs.PrintDefaults() }
	// Flags may come before, between or after the positional arguments.
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
	want := 2
	if sub == "ls" {
		want = 0
	}
	if len(pos) != want {
		fmt.Fprintf(stderr, "cpsguard limit %s: want %d arguments (scope and name), got %d%s\n", sub, want, len(pos), listed(pos))
		limitUsage(stderr)
		return exitUsage
	}
	if want == 2 && !slices.Contains([]string{limits.ScopePeer, limits.ScopeCustomer, limits.ScopeCarrier}, pos[0]) {
		fmt.Fprintf(stderr, "cpsguard limit %s: scope must be peer, customer or carrier (got %q)\n", sub, pos[0])
		return exitUsage
	}
	if sub == "set" {
		// Checked here as the node would, so a typo is a usage error
		// before any request (and NaN never reaches the JSON encoder).
		var bad []string
		if math.IsNaN(*cps) || math.IsInf(*cps, 0) || *cps <= 0 {
			bad = append(bad, fmt.Sprintf("--cps must be a number > 0 (got %v)", *cps))
		}
		if *ttl == "" {
			bad = append(bad, "--ttl is required, e.g. 30m, 1h, 7d")
		}
		if len(bad) > 0 {
			fmt.Fprintf(stderr, "cpsguard limit set: %s\n", strings.Join(bad, "; "))
			return exitUsage
		}
	}
	addr, err := node.url()
	if err != nil {
		fmt.Fprintf(stderr, "cpsguard limit: %v\n", err)
		return exitFail
	}
	ctx, cancel := context.WithTimeout(context.Background(), limitTimeout)
	defer cancel()

	switch sub {
	case "ls":
		l, err := httpapi.FetchLimits(ctx, addr)
		if err != nil {
			fmt.Fprintf(stderr, "cpsguard limit ls: %v\n", err)
			return exitFail
		}
		_ = httpapi.RenderLimits(stdout, l)
		return exitOK
	case "set":
		req := httpapi.LimitRequest{CPS: *cps, TTL: *ttl}
		if *burst >= 0 {
			req.Burst = burst
		}
		c, err := httpapi.SetLimit(ctx, addr, *token, pos[0], pos[1], req)
		if err != nil {
			fmt.Fprintf(stderr, "cpsguard limit set: %v\n", err)
			return exitFail
		}
		_ = httpapi.RenderLimitChange(stdout, c)
		return exitOK
	default: // rm
		c, err := httpapi.RemoveLimit(ctx, addr, *token, pos[0], pos[1])
		if err != nil {
			fmt.Fprintf(stderr, "cpsguard limit rm: %v\n", err)
			return exitFail
		}
		_ = httpapi.RenderLimitChange(stdout, c)
		return exitOK
	}
}
