"""Generate text from a trained checkpoint. See `python scripts/sample.py --help`."""

import sys

from tinygpt.cli.sample import main

if __name__ == "__main__":
    sys.exit(main())
