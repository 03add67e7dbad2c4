"""Draw the lessons' figures (docs/lessons/*.png). See `python scripts/lesson_figures.py --help`."""

import sys

from tinygpt.analysis.lessons import main

if __name__ == "__main__":
    sys.exit(main())
