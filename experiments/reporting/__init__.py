"""Reporting of a study: statistics (stats.py), figures (plots.py), Markdown and JSON tables (tables.py)."""
