"""Tables from bench/unbound.sh's memory runs (bench/unbound_memory.c output, several runtimes).

Per model and runtime: VmData added per executor beyond the first (the slope over executors 1..8),
the memory report's view of one executor (ours), the liveness bound of its activations, and the
VmData of K = 1, 2, 4, 8 executors above the process with the libraries and the params blob loaded.
For batch 8, executor 0 is the batch-1 build holding the weights and the K executors are batch 8.
"""
import json
import sys

MIB = 1024 * 1024


def parse(path):
    runs, cur = {}, None
    for line in open(path):
        tok = line.split(maxsplit=2)
        if line.startswith("== "):
            cur = runs.setdefault(tuple(line[3:].split()), {"vm": {}, "report": {}})
        elif tok and tok[0] == "vm":
            data_kb = int(tok[2].split()[0])
            cur["vm"][tok[1]] = data_kb * 1024
        elif tok and tok[0] == "report":
            cur["report"][tok[1]] = json.loads(tok[2])
    return runs


def main():
    runs = parse(sys.argv[1])
    print("| model | runtime | VmData per added executor | its activations (report) | liveness bound | added / bound "
          "| K=1 | K=2 | K=4 | K=8 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    targets = []
    for (rt, net, batch), r in runs.items():
        vm, base = r["vm"], r["vm"]["baseline"]
        per = (vm["8"] - vm["1"]) / 7
        last = r["report"].get("last")
        first = r["report"].get("first")
        # K executors: batch 1 counts executor 0 among them; batch 8 adds K to the batch-1 holder.
        ks = [vm[str(k - 1 if batch == "b1" else k)] - base for k in (1, 2, 4, 8)]
        act = f"{last['activations'] / MIB:.2f}" if last else "-"
        bound = f"{last['activation_bound'] / MIB:.2f}" if last else "-"
        ratio = f"{per / last['activation_bound']:.3f}" if last else "-"
        print(f"| {net} {batch} | {rt} | {per / MIB:.2f} | {act} | {bound} | {ratio} | "
              + " | ".join(f"{k / MIB:.1f}" for k in ks) + " |")
        if rt == "ours" and batch == "b1" and first:
            weights = first["weights_owned"] + first["weights_shared"] + first["weights_mapped"]
            allowed = weights + first["weights_derived"] + 8 * 1.15 * last["activation_bound"]
            targets.append((net, ks[3], weights, first["weights_derived"], last["activation_bound"], allowed))
    print()
    print("| model (ours, batch 1) | K=8 VmData | weights | derived weights | bound "
          "| weights + derived + 8 x 1.15 x bound | K=8 / that |")
    print("|---|---|---|---|---|---|---|")
    for net, k8, w, d, b, allowed in targets:
        print(f"| {net} | {k8 / MIB:.1f} | {w / MIB:.1f} | {d / MIB:.1f} | {b / MIB:.2f} | {allowed / MIB:.1f} "
              f"| {k8 / allowed:.3f} |")
    print()
    print("All sizes MiB.")


if __name__ == "__main__":
    main()
