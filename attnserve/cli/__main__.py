"""`python -m attnserve.cli`, as the `attnserve` script."""

import sys

from attnserve.cli.main import main

if __name__ == "__main__":  # not in the processes multiprocessing spawns from this one
    sys.exit(main())
