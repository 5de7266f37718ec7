// Package scripts holds the tests of the shell scripts beside it
// (install-deps.sh, fuzz.sh, version.sh); it has no code of its own. A
// failing test names the script and the case.
package scripts
