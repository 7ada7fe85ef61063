"""Reporting of a study: statistics (stats.py), figures (plots.py), Markdown and JSON tables (tables.py)."""
from hcjax.extras import require_studies

require_studies()  # else an ImportError naming hcjax[studies]
