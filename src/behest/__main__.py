"""`python -m behest` is the `behest` command."""

import sys

from behest.cli import main

sys.exit(main())
