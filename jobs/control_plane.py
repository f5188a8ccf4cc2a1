"""Both queries in one job: `spark-submit jobs/control_plane.py --config conf/local.yaml`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))  # a checkout, not a wheel

from controlplane.engine.launch import run


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv, ["coordinator", "quota"], __doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
