"""`python -m multispin ...`: the command line (the local testbed starts its devices this way)."""

from multispin.cli import main

if __name__ == "__main__":
    main()
