"""Test-wide setup: single-threaded Eigen on XLA:CPU (see experiments/xla_flags.py),
set here because it must precede JAX's backend initialisation."""
from experiments.xla_flags import use_single_threaded_eigen

use_single_threaded_eigen()
