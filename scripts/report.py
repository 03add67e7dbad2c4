"""Regenerate an experiment's report from a sweep's runs. See `python scripts/report.py --help`."""

import sys

from tinygpt.experiments.report import main

if __name__ == "__main__":
    sys.exit(main())
