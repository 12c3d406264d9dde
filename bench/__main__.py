import sys

from bench.runner.cli import main

# Worker processes are started with the "spawn" method, which imports this module again under
# another name: only the real entry point may run the command line.
if __name__ == "__main__":
    sys.exit(main())
