import sys

from bench.gfx950.run import main

sys.exit(main())
