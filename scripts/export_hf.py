"""Write a run's model as a Hugging Face GPT-2 dir (transformers). See `python scripts/export_hf.py --help`."""

import sys

from tinygpt.cli.export_hf import main

if __name__ == "__main__":
    sys.exit(main())
