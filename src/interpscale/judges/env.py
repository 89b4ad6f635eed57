"""The judges' environment variables, read here and nowhere else in ``interpscale.judges``:
``$INTERPSCALE_JUDGE_BASE_URL`` / ``$INTERPSCALE_JUDGE_MODEL`` (the endpoint and model when no
argument gives them), the API key from the variable the caller names (read at call time and
never stored, logged or cached), ``$XDG_CACHE_HOME`` (where the default judge cache lives)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

ENV_BASE_URL = "INTERPSCALE_JUDGE_BASE_URL"
ENV_MODEL = "INTERPSCALE_JUDGE_MODEL"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def endpoint(base_url: Optional[str] = None, model: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """``(base_url, model)``: each argument, else its environment variable, else None."""
    return base_url or os.environ.get(ENV_BASE_URL) or None, model or os.environ.get(ENV_MODEL) or None


def api_key(env_name: str = DEFAULT_KEY_ENV) -> Optional[str]:
    """The API key held by ``$env_name`` (None when unset or empty: local servers need none)."""
    return os.environ.get(env_name) or None


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/interpscale`` (``~/.cache/interpscale`` by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "interpscale"
