import sys

from deepagents.cli.main import main

sys.exit(main())
