import sys

from rltool.cli import main

sys.exit(main())
