#!/bin/bash
# Used for BENCHMARKS.md session 26: run it before and after a window of load, the difference over the calls in the window.
# ctxsw.sh NAME: sum of voluntary+nonvoluntary context switches over all threads of processes named NAME
tot=0
for p in $(pgrep -x "$1"); do
  for t in /proc/$p/task/*; do
    v=$(awk '/^voluntary_ctxt_switches|^nonvoluntary_ctxt_switches/{s+=$2} END{print s+0}' $t/status 2>/dev/null)
    tot=$((tot + ${v:-0}))
  done
done
echo $tot
