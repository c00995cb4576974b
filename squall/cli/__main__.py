import sys

from squall.cli.main import main

sys.exit(main())
