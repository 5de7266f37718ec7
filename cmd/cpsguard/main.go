package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// command is one subcommand: run gets the arguments after the subcommand's
// name and returns the process exit code.
type command struct {
	run     func(args []string) int
	summary string
}

// commands holds the subcommands by name. A subcommand in its own file adds
// itself here from init, e.g.
//
//	func init() { commands["status"] = command{runStatus, "show live limits and counts"} }
var commands = map[string]command{
	"serve":   {runServe, "run the proxy"},
	"check":   {runCheck, "validate a configuration file"},
	"version": {runVersion, "print version information"},
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			// `cpsguard help serve` is `cpsguard serve -h`.
			if cmd, ok := commands[args[1]]; ok {
				return cmd.run([]string{"-h"})
			}
			fmt.Fprintf(stderr, "cpsguard help: unknown command %q\n\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	case "--version", "-version", "-v":
		// The convention of most daemons: same output as `cpsguard version`.
		return commands["version"].run(args[1:])
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cpsguard: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd.run(args[1:])
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("cpsguard: SIP call-admission controller (calls-per-second limits)\n\nUsage:\n  cpsguard <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "  %-8s  %s\n", name, commands[name].summary)
	}
	b.WriteString("\nRun 'cpsguard <command> -h' for the flags of a command.\n")
	io.WriteString(w, b.String())
}

// configPathFlag is the --config default: $CPSGUARD_CONFIG, else
// ./cpsguard.yaml.
func configPathFlag() string {
	if p := os.Getenv("CPSGUARD_CONFIG"); p != "" {
		return p
	}
	return "./cpsguard.yaml"
}
