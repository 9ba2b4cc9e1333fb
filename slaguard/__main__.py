"""`python -m slaguard` runs the same CLI as the console script."""

from slaguard.cli.main import main

main()
