"""docs/configuration.md from the comments in configs/. See `python scripts/config_keys.py --help`."""
import sys

from tinygpt.cli.config_keys import main

if __name__ == "__main__":
    sys.exit(main())
