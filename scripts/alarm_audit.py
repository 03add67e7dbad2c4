"""The leak alarm replayed on finished causal runs (tinygpt.analysis.alarm_audit)."""

import sys

from tinygpt.analysis.alarm_audit import main

if __name__ == "__main__":
    sys.exit(main())
