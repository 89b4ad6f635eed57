"""The one builder of a judge from user settings, used by the ``interpscale judge`` command,
the scorers given no judge, and notebooks."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from interpscale.judges import env
from interpscale.judges.batch import BatchReadJudge, BatchWriteJudge
from interpscale.judges.client import JudgeClient
from interpscale.judges.lexical import LEXICAL_LABEL, LexicalJudge
from interpscale.judges.templates import TemplateSet, load_templates
from interpscale.judges.types import Judge
from interpscale.errors import UserError

log = logging.getLogger("interpscale.judges.scorers")

CACHE_NAME = "judge_cache.sqlite"
OFFLINE_BASE_URL = "batch://offline"  # the base URL recorded when only Batch API files are used


def default_cache_path(out_dir: str | Path | None = None) -> Path:
    """``<out_dir>/judge_cache.sqlite``, else ``$XDG_CACHE_HOME/interpscale/judge_cache.sqlite``."""
    return Path(out_dir) / CACHE_NAME if out_dir is not None else env.cache_home() / CACHE_NAME


def build_judge(judge: Judge | None = None, *, base_url: str | None = None, model: str | None = None,
                cache_path: str | Path | None = None, out_dir: str | Path | None = None,
                templates: TemplateSet | str | Path | None = None, batch_write: str | Path | None = None,
                batch_read: str | Path | None = None, **client_kwargs: Any) -> Judge:
    """``judge`` itself when given; else a ``JudgeClient`` (``client_kwargs``) for ``base_url``
    and ``model`` (arguments or $INTERPSCALE_JUDGE_*) caching in ``cache_path`` (default
    ``default_cache_path(out_dir)``), wrapped for ``batch_write`` / ``batch_read`` files (a
    model name is needed, no endpoint); without either, the offline ``LexicalJudge``."""
    if judge is not None:
        return judge
    if batch_write and batch_read:
        raise ValueError("give either batch_write or batch_read, not both")
    tset = templates if isinstance(templates, TemplateSet) else load_templates(templates)
    base_url, model = env.endpoint(base_url, model)
    batch = batch_write or batch_read
    if batch and not model:
        raise UserError(f"Batch API files need a judge model name (--model or ${env.ENV_MODEL})")
    if not batch and bool(base_url) != bool(model):
        raise UserError(f"a judge endpoint needs both base_url and model (got base_url={base_url!r}, "
                        f"model={model!r})")
    if not batch and not base_url:
        log.warning("no judge endpoint configured: scoring with the %s", LEXICAL_LABEL)
        return LexicalJudge(templates=tset)
    cache = Path(cache_path) if cache_path is not None else default_cache_path(out_dir)
    client = JudgeClient(model=model, base_url=base_url or OFFLINE_BASE_URL, cache_path=cache, templates=tset,
                         **client_kwargs)
    if batch:
        return (BatchWriteJudge if batch_write else BatchReadJudge)(client, batch)
    return client


