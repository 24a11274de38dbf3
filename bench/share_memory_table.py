#!/usr/bin/env python3
"""Turns the output of bench/share_memory.sh into the tables of BENCHMARKS.md."""
import re
import sys

txt = open(sys.argv[1]).read()
res = {}
for block in re.split(r"^== ", txt, flags=re.M)[1:]:
    head, *lines = block.strip().split("\n")
    vals = {}
    for line in lines:
        m = re.match(r"(.*?)\s+VmRSS\s+(\d+) kB\s+VmData\s+(\d+) kB", line)
        if m:
            vals[m.group(1).strip()] = (int(m.group(2)), int(m.group(3)))
    res[head] = vals

print("| K | ours: VmData after create | upstream | ours: VmRSS after run | upstream "
      "| ours: VmRSS after free | upstream |")
print("|---|---|---|---|---|---|---|")
for k in (1, 2, 4, 8):
    o, u = res[f"ours, K={k}, resnet18 (batch 1)"], res[f"upstream, K={k}, resnet18 (batch 1)"]
    c, r = f"{k} executors created", f"{k} executors ran"
    print(f"| {k} | {o[c][1]} | {u[c][1]} | {o[r][0]} | {u[r][0]} | {o['all freed'][0]} | {u['all freed'][0]} |")
per = {}
for rt in ("ours", "upstream"):
    per[rt] = (res[f"{rt}, K=8, resnet18 (batch 1)"]["8 executors created"][1]
               - res[f"{rt}, K=1, resnet18 (batch 1)"]["1 executors created"][1]) / 7 / 1024
print()
print(f"Each executor beyond the first adds {per['ours']:.1f} MiB of allocated memory with ours, "
      f"{per['upstream']:.1f} MiB with upstream.")
print()
print("Batch 1 + batch 8 (the batch-8 executor shares the batch-1 executor's weights):")
print()
print("| | VmData after create | VmRSS after run | VmData after run | VmRSS after free | baseline VmRSS |")
print("|---|---|---|---|---|---|")
for label, key in (("ours", "ours, batch 1 + batch 8 sharing weights"),
                   ("ours, one activation arena", "ours, batch 1 + batch 8 sharing weights and one activation arena"),
                   ("upstream", "upstream, batch 1 + batch 8 sharing weights")):
    v = res[key]
    print(f"| {label} | {v['2 executors created'][1]} | {v['2 executors ran'][0]} | {v['2 executors ran'][1]} "
          f"| {v['all freed'][0]} | {v['baseline'][0]} |")
