"""``python -m tuning plan|apply|verify|revert`` (the same as ``ttsd tune ...``)."""

import sys

from tuning.cli import main

raise SystemExit(main(sys.argv[1:]))
