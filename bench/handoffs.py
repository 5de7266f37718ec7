#!/usr/bin/env python3
"""Count a node's goroutine hand-offs from its execution trace.

Usage (a profiling build of the node, cpsguardprof, under load):

    curl -s -o /tmp/node.trace "http://<http.listen>/debug/pprof/trace?seconds=2"
    go tool trace -d=parsed /tmp/node.trace > /tmp/node.txt
    python3 bench/handoffs.py /tmp/node.txt [calls]

It prints how many goroutines were created and how many were woken
(Waiting -> Runnable), with the three innermost frames of the node's own
code (runtime, sync, time and context frames left out) that created or
woke each: divide by the calls in the trace's seconds for per-call
figures. An empty stack is the network poller waking a reader.
"""
import collections
import re
import sys

kinds = collections.Counter()
where = collections.Counter()
cur, frames = None, []


def flush():
    global cur, frames
    if cur:
        own = [f for f in frames if not f.startswith(('runtime.', 'internal/', 'sync.', 'time.', 'context.'))][:3]
        where[(cur, ' < '.join(own))] += 1
    cur, frames = None, []


for line in open(sys.argv[1]):
    if line.startswith('\t'):
        if cur is not None and not line.startswith('\t\t'):
            frames.append(line.strip().split(' @ ')[0])
        continue
    if line.startswith('M='):
        flush()
        m = re.search(r'StateTransition .* GoID=\d+ (\w+)->(\w+)', line)
        if m:
            a, b = m.groups()
            if a == 'NotExist' and b == 'Runnable':
                cur = 'create'
            elif a == 'Waiting' and b == 'Runnable':
                cur = 'unblock'
            if cur:
                kinds[cur] += 1
flush()
calls = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
for k, n in sorted(kinds.items()):
    print(f'{k}: {n} ({n / calls:.2f} per call)')
for (k, w), n in where.most_common(25):
    print(f'{n / calls:6.2f} {k:8} {w or "(network poller)"}')
