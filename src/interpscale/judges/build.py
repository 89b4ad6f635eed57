"""Choosing and building a judge from user settings: endpoint or offline backend, the
cache file, Batch API files. The ``interpscale judge`` command calls these; so can a
notebook or another tool, with the same defaults."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from interpscale.judges.batch import BatchReadJudge, BatchWriteJudge
from interpscale.judges.client import ENV_BASE_URL, ENV_MODEL, JudgeClient
from interpscale.judges.scorers import Judge, resolve_judge
from interpscale.judges.templates import TemplateSet, load_templates

CACHE_NAME = "judge_cache.sqlite"
OFFLINE_BASE_URL = "batch://offline"  # the base URL recorded when only Batch API files are used


def default_cache_path(out_dir: str | Path | None = None) -> Path:
    """``<out_dir>/judge_cache.sqlite`` when an output directory is given, else
    ``$XDG_CACHE_HOME/interpscale/judge_cache.sqlite`` (``~/.cache`` by default)."""
    if out_dir is not None:
        return Path(out_dir) / CACHE_NAME
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "interpscale" / CACHE_NAME


def build_judge(*, base_url: str | None = None, model: str | None = None, cache_path: str | Path | None = None,
                out_dir: str | Path | None = None, templates: TemplateSet | str | Path | None = None,
                batch_write: str | Path | None = None, batch_read: str | Path | None = None,
                **client_kwargs: Any) -> Judge:
    """The judge the settings ask for.

    - ``base_url`` and ``model`` (arguments or $INTERPSCALE_JUDGE_BASE_URL /
      $INTERPSCALE_JUDGE_MODEL): a ``JudgeClient`` caching in ``cache_path`` (default
      ``default_cache_path(out_dir)``); ``client_kwargs`` go to JudgeClient.
    - ``batch_write`` / ``batch_read``: the client wrapped to write a Batch API request
      file or read an output file (a model name is needed; the endpoint is not).
    - neither: the offline lexical backend, with a warning.
    """
    if batch_write and batch_read:
        raise ValueError("give either batch_write or batch_read, not both")
    tset = templates if isinstance(templates, TemplateSet) or templates is None else load_templates(templates)
    base_url = base_url or os.environ.get(ENV_BASE_URL)
    model = model or os.environ.get(ENV_MODEL)
    batch = batch_write or batch_read
    if not (base_url and model) and not batch:
        return resolve_judge(base_url=base_url, model=model, templates=tset)
    if batch and not model:
        raise ValueError(f"Batch API files need a judge model name (--model or ${ENV_MODEL})")
    cache = Path(cache_path) if cache_path is not None else default_cache_path(out_dir)
    client = JudgeClient(model=model, base_url=base_url or OFFLINE_BASE_URL, cache_path=cache, templates=tset,
                         **client_kwargs)
    if batch_write:
        return BatchWriteJudge(client, batch_write)
    if batch_read:
        return BatchReadJudge(client, batch_read)
    return client


def cache_of(judge: Judge) -> Optional[Any]:
    """The JudgeCache behind a judge (None for the offline backend)."""
    client = getattr(judge, "client", judge)
    return getattr(client, "cache", None)
