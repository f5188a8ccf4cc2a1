"""Both queries in one job: `spark-submit jobs/control_plane.py --config conf/local.yaml`, the
same as `python -m controlplane job all` (docs/engine.md, "Operations")."""

from __future__ import annotations

import sys
from pathlib import Path

try:  # the installed package (a wheel, or the venv's editable install) always wins
    from controlplane.cli.job import main as job
except ModuleNotFoundError:  # a checkout without the package installed: its lib/, last
    sys.path.append(str(Path(__file__).resolve().parents[1] / "lib"))
    from controlplane.cli.job import main as job


def main(argv: list[str] | None = None) -> int:
    return job(["all", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
