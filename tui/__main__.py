"""`python -m tui` is the `mmuscope` command."""

import sys

from .cli import main

sys.exit(main())
