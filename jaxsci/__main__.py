"""``python -m jaxsci``: the same command line as ``jaxsci``."""

import sys

from jaxsci.cli import main

sys.exit(main())
