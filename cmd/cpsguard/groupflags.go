package main

import (
	"flag"
	"fmt"
	"io"
)

// printGroupFlags writes the flags of a command with subcommands (carrier,
// limit) after its usage text, as `cpsguard <command> -h` shows them: the
// flags every subcommand takes, then each subcommand's own. flags builds
// the flag set a subcommand parses, so the group help can never list a
// flag the subcommand lacks nor miss one it has.
func printGroupFlags(w io.Writer, command string, subs []string, flags func(sub string) *flag.FlagSet) {
	sets := make([]*flag.FlagSet, len(subs))
	count := map[string]int{}
	for i, sub := range subs {
		sets[i] = flags(sub)
		sets[i].VisitAll(func(f *flag.Flag) { count[f.Name]++ })
	}
	common := subset(sets[0], func(f *flag.Flag) bool { return count[f.Name] == len(subs) })
	fmt.Fprintf(w, "\nFlags of every %s subcommand:\n", command)
	common.SetOutput(w)
	common.PrintDefaults()
	for i, sub := range subs {
		own := subset(sets[i], func(f *flag.Flag) bool { return count[f.Name] < len(subs) })
		n := 0
		own.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			continue
		}
		fmt.Fprintf(w, "\nFlags of cpsguard %s %s:\n", command, sub)
		own.SetOutput(w)
		own.PrintDefaults()
	}
}

// subset is a flag set with the flags of fs that keep says, for printing.
func subset(fs *flag.FlagSet, keep func(*flag.Flag) bool) *flag.FlagSet {
	out := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if keep(f) {
			out.Var(f.Value, f.Name, f.Usage)
		}
	})
	return out
}
