"""Attention sweep (issue 14): `onlinesoftmax attention-sweep` under the name the committed results were made with
(harness/attention_sweep.py has the shapes, the timing and the table).

    PYTHONPATH=src python benchmarks/attention.py benchmarks/results/h200-attention   # writes .csv, .md and .png
"""

import sys

from onlinesoftmax.cli import main

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(["attention-sweep", "--out", sys.argv[1] + ".csv"]))
