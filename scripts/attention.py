"""Draw a checkpoint's attention on any text as an interactive page. See `python scripts/attention.py --help`."""

import sys

from tinygpt.cli.attention_page import main

if __name__ == "__main__":
    sys.exit(main())
