package main

import (
	"errors"
	"flag"
	"fmt"
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
	var ve *config.ValidationError
	switch {
	case errors.As(err, &ve):
		fmt.Fprintf(os.Stderr, "%s: invalid, %d error(s):\n", *path, len(ve.Errors))
		for i, line := range ve.Errors {
			fmt.Fprintln(os.Stderr, placed(*path, ve.At(i))+line)
		}
		return exitFail
	case err != nil:
		fmt.Fprintf(os.Stderr, "cpsguard check: %v\n", err)
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

// placed is the "file:line:column: " prefix of an error at a place in the
// file (the form editors and CI annotations jump to), "" for one without.
func placed(file string, at config.Position) string {
	switch {
	case at.Line <= 0:
		return ""
	case at.Column <= 0:
		return fmt.Sprintf("%s:%d: ", file, at.Line)
	default:
		return fmt.Sprintf("%s:%d:%d: ", file, at.Line, at.Column)
	}
}

// flagExit maps a flag parse error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
