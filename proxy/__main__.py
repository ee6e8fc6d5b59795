"""`python -m proxy`: the command line (see proxy.cli)."""

import sys

from proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())
