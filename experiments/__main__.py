"""`python -m experiments ...` is the `hcjax` command."""
import sys

from experiments.cli import main

sys.exit(main())
