package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/cpsguard/cpsguard/config"
)

// runCheck validates a configuration file: exit 0 and a summary on stdout
// (no secrets) followed by the warnings, or exit 1 and every error, one per
// line, on stderr, each with its place in the file ("FILE:7:5: ") when it
// has one. --quiet leaves the summary out, for systemd's ExecReload
// (the journal gets the warnings and errors only).
func runCheck(args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	path := fs.String("config", configPathFlag(), "configuration `file` (also $CPSGUARD_CONFIG)")
	quiet := fs.Bool("quiet", false, "print only warnings and errors")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: cpsguard check [--config FILE] [--quiet]\n\nValidate FILE with the environment overrides applied; print a summary\nand \"warning:\" lines (exit 0), or every error, one per line (exit 1).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cpsguard check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	c, err := config.Load(*path)
	if err != nil {
		printLoadError(os.Stderr, "check", *path, err)
		return exitFail
	}
	if !*quiet {
		fmt.Printf("%s: OK\n%s", *path, c.Summary())
	}
	for _, w := range config.Warnings(c) {
		fmt.Printf("warning: %s\n", w)
	}
	return exitOK
}

// printLoadError writes why the configuration at path did not load, the
// same way for every command that loads one (check, serve): a
// ValidationError as a count and then every error on a line of its own,
// each after its place in the file ("FILE:7:5: ") when it has one; any
// other error (an unreadable file) on one line after the command's name.
func printLoadError(w io.Writer, command, path string, err error) {
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		fmt.Fprintf(w, "cpsguard %s: %v\n", command, err)
		return
	}
	fmt.Fprintf(w, "%s: invalid, %d error(s):\n", path, len(ve.Errors))
	for _, line := range ve.Placed() {
		fmt.Fprintln(w, line)
	}
}

// flagExit maps a flag parse error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
