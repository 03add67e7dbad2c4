"""Check a GPU machine in at most 8 minutes (make gpu-check). See `python scripts/gpu_check.py --help`."""

import sys

from tinygpt.bench.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
