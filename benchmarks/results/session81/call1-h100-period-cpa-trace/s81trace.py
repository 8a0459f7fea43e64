"""Session 81 probe: phase times of the one-launch period kernel from a tree whose period_body prints each CTA's
%globaltimer stamps (entry, stats loads folded, stats done, barrier 1, merge done, barrier 2, apply done). Runs
benchmarks/profile_once.py --regime period --timeline (its third call queued behind a spin kernel after an L2 flush)
and reads that call's stamps. Usage: python s81trace.py TREE_SRC OP DTYPE MxN ..."""
import statistics
import subprocess
import sys

NAMES = ("start", "loaded", "stats", "bar1", "merge", "bar2", "apply")


def main():
    src, rest = sys.argv[1], sys.argv[2:]
    for i in range(0, len(rest), 3):
        op, dt, shape = rest[i:i + 3]
        r = subprocess.run([sys.executable, "benchmarks/profile_once.py", op, dt, shape, "--dim", "0", "--regime",
                            "period", "--timeline"], capture_output=True, text=True, env={**__import__("os").environ,
                                                                                          "PYTHONPATH": src})
        rows = [list(map(int, ln.split()[1:])) for ln in r.stdout.splitlines() if ln.startswith("PT ")]
        other = [ln for ln in r.stdout.splitlines() if not ln.startswith("PT ")]
        grid = len({row[0] for row in rows})
        if not grid:
            print(f"{op} {dt} {shape}: no stamps; rc {r.returncode}\n{r.stderr[-2000:]}")
            continue
        last = rows[-grid:]
        t0 = min(row[1] for row in last)
        print(f"## {op} {dt} {shape} dim 0: grid {grid}; " + " | ".join(ln.strip() for ln in other if "timeline" in ln or "period" in ln))
        for j, name in enumerate(NAMES):
            v = sorted((row[1 + j] - t0) / 1000 for row in last)
            print(f"  {name:7s} min {v[0]:6.1f}  median {statistics.median(v):6.1f}  max {v[-1]:6.1f} us")


main()
