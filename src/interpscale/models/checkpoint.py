"""Checkpoints: weights and config saved together, loaded with ``weights_only=True``."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pickle
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from interpscale._atomic import atomic_path
from interpscale.models import plugins
from interpscale.models.protocol import BUILD_ATTR, DataFields
from interpscale.models.registry import build_model, get_family

FORMAT = "interpscale-model/1"


def _config_dict(model: nn.Module) -> dict[str, Any]:
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError(f"{type(model).__name__} has no .config; cannot checkpoint it")
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict())
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    raise ValueError(f"{type(model).__name__}.config is neither a dataclass nor has to_dict()")


def _plugins_of(model: nn.Module) -> list[str]:
    """The plugins a process loading this checkpoint imports first: those loaded here, and the
    model class's module when it is neither this package's nor among them."""
    module = type(model).__module__
    known = module.startswith("interpscale.") or any(p == module or p.endswith(f"/{module}.py") for p in plugins.LOADED)
    return [*plugins.LOADED, *([] if known else [module])]


def save_checkpoint(model: nn.Module, path: str | os.PathLike, extra: Optional[dict] = None) -> Path:
    """Write ``{format, family, config, class, state_dict, extra}`` atomically to ``path``; ``extra``
    holds only plain data (numbers, strings, lists, dicts, tensors): it loads ``weights_only``."""
    path = Path(path)
    cfg = _config_dict(model)
    if "family" not in cfg or "size" not in cfg:
        raise ValueError("model.config must have 'family' and 'size' fields to be checkpointed")
    payload = {
        "format": FORMAT,
        "family": cfg["family"],
        "config_json": json.dumps(cfg, sort_keys=True),
        "class": f"{type(model).__module__}:{type(model).__qualname__}",
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "extra": dict(extra or {}),
        # how to rebuild it: the builder's arguments and the plugin modules that register its family
        "build_json": json.dumps(getattr(model, BUILD_ATTR, None)),
        "plugins": _plugins_of(model),
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def _rebuild(family: str, cfg: dict[str, Any], cls_path: str, build: Optional[dict]) -> nn.Module:
    # A family of this package rebuilds from its class's from_config; a plugin family through
    # its own builder with the arguments it was built with.
    module, _, qualname = cls_path.partition(":")
    if module.startswith("interpscale."):
        try:
            cls = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError):
            cls = None
        if cls is not None and hasattr(cls, "from_config"):
            return cls.from_config(cfg)
    if build:
        return build_model(family, build["size"], data=DataFields.from_dict(build.get("data")),
                           **build.get("overrides", {}))
    overrides = {k: v for k, v in cfg.items() if k not in ("family", "size")}
    return get_family(family).builder(cfg["size"], data=DataFields(), **overrides)


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> tuple[nn.Module, dict]:
    """``(model, extra)``: the model rebuilt from its saved config with the weights loaded; a
    ValueError when the file is not a model checkpoint or its weights do not match its config."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as exc:  # truncated, not a zip, unreadable
        raise ValueError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {str(exc).split('. ')[0] or 'empty file'}); "
                         "it is truncated or not a checkpoint: use another one or retrain") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not an interpscale model checkpoint (format {FORMAT!r})")
    cfg = json.loads(payload["config_json"])
    plugins.load_plugins(payload.get("plugins") or ())  # before the family lookup
    model = _rebuild(payload["family"], cfg, payload.get("class", ""), json.loads(payload.get("build_json") or "null"))
    state = payload["state_dict"]
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: saved {tuple(state[k].shape)} vs config {tuple(own[k].shape)}"
              for k in sorted(set(own) & set(state)) if state[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        raise ValueError(f"checkpoint {path} does not match its config ({payload['family']}/{cfg.get('size')}): "
                         f"missing={missing[:5]} unexpected={unexpected[:5]} shape mismatches={shapes[:5]}")
    model.load_state_dict(state, strict=True)
    model.to(map_location if isinstance(map_location, (str, torch.device)) else "cpu")
    return model, dict(payload.get("extra") or {})
