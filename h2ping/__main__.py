import sys

from .process.cli import main

sys.exit(main())
