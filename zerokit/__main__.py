import sys

from zerokit.cli import main

sys.exit(main())
