"""Mutation scores from a `mutmut run` (make mutate). See `python scripts/mutation_scores.py --help`."""

import sys

from tinygpt.bench.mutation import main

if __name__ == "__main__":
    sys.exit(main())
