"""The entry point of the one-file binary (packaging/edgegw.spec): `edgegw ARGS` is
`python -m edgegw ARGS` without a Python installation."""

import multiprocessing
import sys

from edgegw.__main__ import main

if __name__ == "__main__":
    # A no-op unless edgegw starts processes through multiprocessing: in a frozen binary
    # sys.executable is the binary itself, and this is what lets such a child run its target
    # instead of parsing edgegw's command line.
    multiprocessing.freeze_support()
    sys.exit(main())
