"""``python -m controlplane class-archive [--force]``: build the local JVM's class archive.

A local job's JVM then maps the classes it loads at its start instead of reading them from
Spark's jars: a restarted job answered about 4-5 s sooner (docs/engine.md, "The JVM's class
archive"). ``make setup`` runs this; run it again after changing Java or pyspark (a session
finds no matching archive then, and starts as before). ``--force`` builds it even when the
one for this Java and pyspark is there.
"""

from __future__ import annotations

import argparse
import logging
import sys

from controlplane.engine.class_archive import ArchiveFailed, build
from controlplane.engine.session import pyspark_jars_dir
from controlplane.jvm import MissingJvm

PROG = "python -m controlplane class-archive"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="build it again")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        path = build(pyspark_jars_dir(), force=args.force)
    except (ArchiveFailed, MissingJvm) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
