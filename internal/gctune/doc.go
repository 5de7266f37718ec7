// Package gctune sets the Go garbage collector for a proxy node.
//
// A node allocates ~20 KB per call but keeps a live heap of a few MB, so
// the runtime's default (GOGC=100: collect whenever the heap doubles) spends
// a third of the node's CPU marking (BENCHMARKS.md, finding F2). Apply
// raises the target to 400 and, in a cgroup with a memory limit (a
// container's, or a systemd unit's MemoryMax=), sets a soft memory limit
// (GOMEMLIMIT) at 90 % of it, so a large queue of waiting calls still makes
// the collector work before the kernel kills the process. The limit is the
// one of the process's own cgroup, found with
// github.com/KimMachineGun/automemlimit.
//
// The operator's own GOGC and GOMEMLIMIT always win: Apply changes nothing
// that the environment sets. It cannot fail; an unreadable cgroup file only
// means no memory limit is set.
package gctune
