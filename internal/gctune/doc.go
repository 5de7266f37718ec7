// Package gctune sets the Go garbage collector for a proxy node.
//
// A node allocates ~20 KB per call but keeps a live heap of a few MB, so
// the runtime's default (GOGC=100: collect whenever the heap doubles) spends
// a third of the node's CPU marking (BENCHMARKS.md, finding F2). Apply
// raises the target to 400 and, inside a container with a memory limit,
// sets a soft memory limit below it so a large queue of waiting calls still
// makes the collector work before the kernel kills the process.
//
// The operator's own GOGC and GOMEMLIMIT always win: Apply changes nothing
// that the environment sets. It cannot fail; an unreadable cgroup file only
// means no memory limit is set.
package gctune
