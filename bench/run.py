"""Runs the benchmarks in turn and prints their figures (``make bench``). Asserts nothing.

python bench/run.py            # the two cores (a few minutes)
python bench/run.py --engine   # also the Spark engine (group vs shard keying; slow)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", action="store_true", help="also run bench/engine_bench.py")
    args = parser.parse_args()
    scripts = ["coordinator_bench.py", "quota_bench.py"]
    if args.engine:
        scripts.append("engine_bench.py")
    failed = 0
    for script in scripts:
        print(f"\n=== bench/{script}", flush=True)
        failed |= subprocess.call([sys.executable, str(HERE / script)]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
