"""`python -m experiments ...` is the `hcjax` command."""
import sys

from experiments.entry import main

sys.exit(main())
