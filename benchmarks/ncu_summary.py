"""One line per kernel from benchmarks/ncu.sh's outputs: time, bandwidth on the ideal bytes, DRAM and L2 load,
occupancy, clusters resident, and the three largest warp stalls (cycles per issued instruction).

    python benchmarks/ncu_summary.py out/ncu/*.txt
"""

import re
import sys
from pathlib import Path

METRIC = re.compile(r"^\s{4}(\S.*?)\s{2,}(\S*)\s+([\d,.]+)\s*$")
HEADER = re.compile(r"^  (?:void )?(\S.*?)(?:\(.*\))? \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context")
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
WANT = {"Duration": "us", "DRAM Throughput": "dram%", "L2 Cache Throughput": "l2%", "Registers Per Thread": "regs",
        "Grid Size": "grid", "Block Size": "block", "Cluster Size": "C", "Max Active Clusters": "clusters",
        "Achieved Occupancy": "occ%", "Warp Cycles Per Issued Instruction": "cpi"}


def kernels(path: Path):
    """(name, ideal bytes, {metric: value}, {stall: value}) per profiled kernel in one ncu text output."""
    text = path.read_text(errors="replace")
    m = re.search(r"ideal bytes (\d+)", text)
    nbytes = int(m.group(1)) if m else None
    out, cur = [], None
    for line in text.splitlines():
        h = HEADER.match(line)
        if h:
            cur = (h.group(1), {}, {})
            out.append(cur)
            continue
        mm = METRIC.match(line)
        if cur is None or not mm:
            continue
        name, unit, value = mm.groups()
        value = float(value.replace(",", ""))
        if name in WANT:
            cur[1][WANT[name]] = value * (1e3 if unit == "ms" else 1e-3 if unit == "ns" else 1)
        st = STALL.match(name)
        if st:
            cur[2][st.group(1)] = value
    return [(k, nbytes, met, stalls) for k, met, stalls in out]


def main():
    print(f"{'case':20s} {'kernel':38s} {'us':>8s} {'GB/s':>6s} {'dram%':>5s} {'l2%':>5s} {'grid':>7s} "
          f"{'C':>2s} {'clus':>4s} {'regs':>4s} {'occ%':>5s} {'cpi':>5s}  top stalls (cycles per issue)")
    for arg in sys.argv[1:]:
        path = Path(arg)
        for name, nbytes, m, stalls in kernels(path):
            us = m.get("us")
            bw = f"{nbytes / (us * 1e3):6.0f}" if nbytes and us else "     -"
            top = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
            print(f"{path.stem:20s} {name[:38]:38s} {us or 0:8.1f} {bw} {m.get('dram%', 0):5.1f} "
                  f"{m.get('l2%', 0):5.1f} "
                  f"{m.get('grid', 0):7.0f} {m.get('C', 1):2.0f} {m.get('clusters', 0):4.0f} {m.get('regs', 0):4.0f} "
                  f"{m.get('occ%', 0):5.1f} {m.get('cpi', 0):5.1f}  " + ", ".join(f"{k} {v:.1f}" for k, v in top))


if __name__ == "__main__":
    main()
