"""Where the test suite's time goes: ``python tests/profile_report.py FOLDER [N]``.

Reads the per-test lines a run with ``JAXCOMPRESS_TEST_PROFILE=FOLDER`` wrote (``conftest.py``)
and prints the totals (wall seconds summed over the workers, CPU seconds of the test processes
and of the processes they started, XLA compile seconds and programs, trace + lower seconds,
persistent-cache hits), then the N files and tests (default 25) that take longest, the files by
CPU seconds (the order of ``conftest.HEAVY_FILES``), and the N jitted functions, library call
sites and test call sites that cost most to trace and compile. The processes a test starts
(benchmarks, command lines) count in its wall and child CPU seconds only.
"""

import json
import sys
from collections import defaultdict
from pathlib import Path


def main(folder: str, top: int = 25) -> None:
    rows = [json.loads(line) for p in sorted(Path(folder).glob("*.jsonl"))
            for line in p.read_text().splitlines() if line.strip()]
    keys = ("wall_s", "cpu_s", "child_cpu_s", "compile_s", "programs", "trace_s", "cache_hits")
    total = {k: sum(r[k] for r in rows) for k in keys}
    print(f"{len(rows)} tests: " + ", ".join(f"{k} {total[k]:.0f}" for k in keys))
    files = defaultdict(lambda: dict.fromkeys(keys, 0.0))
    for r in rows:
        for k in keys:
            files[r["test"].split("::")[0]][k] += r[k]
    header = (f"{'wall':>7} {'cpu':>6} {'child':>6} {'compile':>8} {'progs':>6} {'trace':>6} "
              f"{'hits':>5}  ")
    for title, items in (("files", files.items()),
                         ("tests", ((r["test"], r) for r in rows))):
        print(f"\n{title} by wall time\n{header}")
        for name, r in sorted(items, key=lambda kv: -kv[1]["wall_s"])[:top]:
            print(f"{r['wall_s']:7.1f} {r['cpu_s']:6.1f} {r['child_cpu_s']:6.1f} "
                  f"{r['compile_s']:8.1f} {r['programs']:6.0f} "
                  f"{r['trace_s']:6.1f} {r['cache_hits']:5.0f}  {name}")
    heavy = sorted(files, key=lambda f: -(files[f]["cpu_s"] + files[f]["child_cpu_s"]))
    print("\nfiles by CPU seconds (theirs and their processes'), for conftest.HEAVY_FILES:\n"
          + ", ".join(f"{Path(f).name} {files[f]['cpu_s'] + files[f]['child_cpu_s']:.0f}"
                      for f in heavy[:top]))
    names = defaultdict(lambda: [0, 0.0, 0, 0.0])
    for p in Path(folder).glob("*.names.json"):
        for name, counts in json.loads(p.read_text()).items():
            names[name] = [a + b for a, b in zip(names[name], counts, strict=True)]
    groups = {"jitted functions": lambda n: not n.startswith(("lib:", "test:")),
              "library call sites (innermost jaxcompress/ frame)": lambda n: n.startswith("lib:"),
              "test call sites (innermost tests/ frame)": lambda n: n.startswith("test:")}
    for title, keep in groups.items():
        print(f"\n{title} by compile + trace seconds\n{'progs':>6} {'compile':>8} "
              f"{'traces':>6} {'trace':>6}  name")
        rows = sorted(((k, v) for k, v in names.items() if keep(k)),
                      key=lambda kv: -kv[1][1] - kv[1][3])
        for name, (n, c, t, ts) in rows[:top]:
            print(f"{n:6d} {c:8.1f} {t:6d} {ts:6.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
