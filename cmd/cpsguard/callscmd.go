package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
)

func init() {
	commands["calls"] = command{runCalls, "list the pool's live calls, or end one (calls end CALL_ID)"}
}

// callsTimeout bounds one calls request (ending another node's call waits
// up to 3 s for it).
const callsTimeout = 15 * time.Second

// runCalls implements `cpsguard calls [--peer P] [--carrier C]` and
// `cpsguard calls end CALL_ID`, through one node's operations API (found
// as nodeFlags.url says). Exit code exitOK, exitFail when the node refuses
// or cannot be reached (or, for end, lists no such call), exitUsage on a
// usage error.
func runCalls(args []string) int {
	return callsMain(args, os.Stdout, os.Stderr)
}

func callsUsage(w io.Writer) {
	fmt.Fprint(w, "usage:\n"+
		"  cpsguard calls [--peer NAME] [--carrier NAME]\n"+
		"  cpsguard calls end CALL_ID\n\n"+
		"Lists the live calls of the whole pool (forwarded and not ended; ANSWERED\n"+
		"is - while a call rings), or ends the calls of one Call-ID: the node that\n"+
		"holds an answered call sends BYE to both legs, a ringing one is cancelled.\n"+
		"end needs http.token: --token or $CPSGUARD_HTTP_TOKEN. Common flags: --addr,\n"+
		"--config (find the node as `cpsguard status` does).\n")
}

func callsMain(args []string, stdout, stderr io.Writer) int {
	sub := "ls"
	if len(args) > 0 {
		switch args[0] {
		case "end":
			sub, args = "end", args[1:]
		case "help", "--help":
			args = []string{"-h"} // the usage and every flag, as -h prints them
		}
	}
	fs := flag.NewFlagSet("calls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := addNodeFlags(fs)
	token := addTokenFlag(fs)
	var peer, carrier *string
	if sub == "ls" {
		peer = fs.String("peer", "", "only the calls of this peer")
		carrier = fs.String("carrier", "", "only the calls sent to this carrier")
	}
	fs.Usage = func() { callsUsage(fs.Output()); fmt.Fprintln(fs.Output()); fs.PrintDefaults() }
	// Flags may come before or after the Call-ID.
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK // fs.Usage printed the usage and every flag
			}
			return exitUsage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	want := 0
	if sub == "end" {
		want = 1
	}
	if len(pos) != want {
		fmt.Fprintf(stderr, "cpsguard calls: want %d argument(s), got %d%s\n", want, len(pos), listed(pos))
		callsUsage(stderr)
		return exitUsage
	}
	addr, err := node.url()
	if err != nil {
		fmt.Fprintf(stderr, "cpsguard calls: %v\n", err)
		return exitFail
	}
	ctx, cancel := context.WithTimeout(context.Background(), callsTimeout)
	defer cancel()
	if sub == "ls" {
		l, err := httpapi.FetchCalls(ctx, addr, *peer, *carrier)
		if err != nil {
			fmt.Fprintf(stderr, "cpsguard calls: %v\n", err)
			return exitFail
		}
		httpapi.RenderCalls(stdout, l, time.Now())
		return exitOK
	}
	res, err := httpapi.EndCall(ctx, addr, *token, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "cpsguard calls end: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "call %s: ended %d call(s) on the node asked", res.CallID, res.Ended)
	if len(res.Requested) > 0 {
		fmt.Fprintf(stdout, "; asked %s to end theirs", strings.Join(res.Requested, ", "))
	}
	fmt.Fprintln(stdout)
	if len(res.Pending) > 0 {
		fmt.Fprintf(stdout, "still listed on %s: the node may be down (its calls leave the list within sip.call_refresh_ttl)\n", strings.Join(res.Pending, ", "))
	}
	if res.Error != "" {
		fmt.Fprintf(stdout, "note: %s\n", res.Error)
	}
	return exitOK
}

// listed is ": a b" for the arguments given, "" for none: a usage error's
// tail that never ends on a dangling colon.
func listed(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return ": " + strings.Join(args, " ")
}
