import sys

from rlcockpit.cli import main

sys.exit(main())
