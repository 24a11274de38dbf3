"""Instructions of a callgrind profile by the object (executable or library) that ran them:
prints `object instructions` per line, the objects' own costs (calls' inclusive costs left out).

  callgrind_objects.py CALLGRIND_OUT
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict


def by_object(path: str) -> dict[str, int]:
    names: dict[str, str] = {}
    totals: dict[str, int] = defaultdict(int)
    current = "?"
    after_calls = False
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("cob="):
            # A callee's object: it may name an id first used later by "ob=".
            m = re.match(r"cob=\((\d+)\) (.+)$", line)
            if m:
                names[m.group(1)] = m.group(2)
        elif line.startswith("ob="):
            # Name compression: "ob=(3) /path" names id 3; "ob=(3)" refers to it.
            m = re.match(r"ob=\((\d+)\)(?: (.*))?$", line)
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                current = names.get(m.group(1), m.group(1))
            else:
                current = line[3:]
        elif line.startswith("calls="):
            after_calls = True  # the next cost line is the call's inclusive cost
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            if after_calls:
                after_calls = False
                continue
            fields = line.split()
            if len(fields) >= 2:
                totals[current] += int(fields[-1])
    return totals


def main() -> None:
    for name, count in sorted(by_object(sys.argv[1]).items(), key=lambda kv: -kv[1]):
        print(f"{name} {count}")


if __name__ == "__main__":
    main()
