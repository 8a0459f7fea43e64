"""`python -m onlinesoftmax ...` runs the CLI (where the console script is not installed)."""

import sys

from .cli import main

sys.exit(main())
