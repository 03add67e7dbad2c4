"""docs/benchmarks.md from the JSONs scripts/benchmark.py writes. See `python scripts/benchmark_report.py --help`."""

import sys

from tinygpt.bench.report import main

if __name__ == "__main__":
    sys.exit(main())
