"""Rewrite runs written by an earlier version in today's names. See `python scripts/migrate_run.py --help`."""

import sys

from tinygpt.cli.migrate_run import main

if __name__ == "__main__":
    sys.exit(main())
