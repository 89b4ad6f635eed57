"""Bundled offline lm-eval task YAMLs and their local JSONL data (a package so that
``utils.py`` ships in wheels; lm-eval loads the YAMLs by path)."""
