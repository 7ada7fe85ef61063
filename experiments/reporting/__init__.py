"""Reporting of a study: statistics (stats.py), figures (plots.py), Markdown and JSON tables (tables.py), the
verdict on its test seeds (verdict.py, in words: verdict_text.py)."""
