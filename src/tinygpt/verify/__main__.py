"""python -m tinygpt.verify TARGET: see tinygpt.verify.cli."""

import sys

from tinygpt.verify.cli import main

sys.exit(main())
