import sys

from kernel_lib.cli import main

sys.exit(main())
