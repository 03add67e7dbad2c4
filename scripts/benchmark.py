"""Benchmark tinygpt against nanoGPT on one machine. See `python scripts/benchmark.py --help`."""

import sys

from tinygpt.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
