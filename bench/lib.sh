# What the benchmark scripts share: alternating the two runtimes in processes of their own and
# printing a table row. Source it after setting `rounds`, `ours` (the folder of this library) and
# `upstream` (the folder of upstream's).

# alternate FIELD CMD...: runs CMD `rounds` times on each runtime, alternating, and sets O and U to
# the figures (space separated): field FIELD (space separated) of the last line CMD prints. Extra
# environment for one side: OURS_ENV / UPSTREAM_ENV ("NAME=value ...").
alternate() {
  local field=$1
  shift
  O="" U=""
  for _ in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    O+="$(env ${OURS_ENV:-} LD_LIBRARY_PATH="$ours" "$@" 2>/dev/null | tail -1 | cut -d' ' -f"$field") "
    # shellcheck disable=SC2086
    U+="$(env ${UPSTREAM_ENV:-} LD_LIBRARY_PATH="$upstream" "$@" 2>/dev/null | tail -1 | cut -d' ' -f"$field") "
  done
}

# row LABEL [DECIMALS] [MINIMA]: a table row of O and U: each side's median (min-max), the ratio of
# the medians, and with MINIMA=minima the ratio of the minima too. An empty U prints "-" there.
row() {
  python3 - "$1" "${2:-1}" "${3:-}" "$O" "$U" <<'PY'
import statistics, sys
label, decimals, minima = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "minima"
o = [float(x) for x in sys.argv[4].split()]
u = [float(x) for x in sys.argv[5].split()]
f = lambda v: f"{v:.{decimals}f}"
side = lambda v: f"{f(statistics.median(v))} ({f(min(v))}-{f(max(v))})"
cells = [label, side(o)]
if u:
    cells += [side(u), f"{statistics.median(o) / statistics.median(u):.3f}"]
    if minima:
        cells.append(f"{min(o) / min(u):.3f}")
else:
    cells += ["-", "-"] + (["-"] if minima else [])
print("| " + " | ".join(cells) + " |")
PY
}
