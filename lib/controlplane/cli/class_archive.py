"""``python -m controlplane class-archive [--force]``: build the local JVM's class archive.

A local Spark session's JVM then maps the classes it loads at its start instead of reading
them from Spark's jars: a restarted job answered about 5 s sooner (docs/engine.md, "The JVM's
class archive"). ``make setup`` (and ``make demo``, ``make test``) runs this every time: it
returns at once when the archive for this Java and class path is there, and builds it (about
40 s) when not, as after an upgrade of Java or pyspark. A build that failed is not tried again
for the same Java and class path (its reason is printed instead) until ``--force``, which also
builds an archive that is there.
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
    parser.add_argument("--force", action="store_true", help="build it, even again")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        path = build(pyspark_jars_dir(), force=args.force)
    except (ArchiveFailed, MissingJvm, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
