"""Checkpoints: weights and config saved together. Evaluation checkpoints are directories of
safetensors + JSON (:func:`save_pretrained_dir`, read without unpickling); older ``.pt`` files
(:func:`save_checkpoint`) still load with ``weights_only=True`` (docs/training.md, "Checkpoints")."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from interpscale._atomic import atomic_path
from interpscale.errors import UserError
from interpscale.models import plugins
from interpscale.models.protocol import BUILD_ATTR, DataFields
from interpscale.models.registry import build_model, get_family
from interpscale.models.types import SPECIAL_TEXT

FORMAT = "interpscale-model/1"
FORMAT_DIR = "interpscale-model-dir/1"


def _record(model: nn.Module, extra: Optional[dict]) -> dict[str, Any]:
    """What both formats store next to the weights: format-independent keys, the config as ``config``."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError(f"{type(model).__name__} has no .config; cannot checkpoint it")
    if hasattr(cfg, "to_dict"):
        cfg = dict(cfg.to_dict())
    elif dataclasses.is_dataclass(cfg):
        cfg = dataclasses.asdict(cfg)
    else:
        raise ValueError(f"{type(model).__name__}.config is neither a dataclass nor has to_dict()")
    if "family" not in cfg or "size" not in cfg:
        raise ValueError("model.config must have 'family' and 'size' fields to be checkpointed")
    # how to rebuild it: the builder's arguments and the plugin modules that register its family
    cls = f"{type(model).__module__}:{type(model).__qualname__}"
    return {"family": cfg["family"], "config": cfg, "class": cls, "build": getattr(model, BUILD_ATTR, None),
            "plugins": _plugins_of(model), "extra": dict(extra or {})}


def _plugins_of(model: nn.Module) -> list[str]:
    """The plugins a process loading this checkpoint imports first: those loaded here, and the
    model class's module when it is neither this package's nor among them."""
    module = type(model).__module__
    known = module.startswith("interpscale.") or any(p == module or p.endswith(f"/{module}.py") for p in plugins.LOADED)
    return [*plugins.LOADED, *([] if known else [module])]


def save_checkpoint(model: nn.Module, path: str | os.PathLike, extra: Optional[dict] = None) -> Path:
    """Write ``{format, family, config, class, state_dict, extra}`` atomically to ``path``; ``extra``
    holds only plain data (numbers, strings, lists, dicts, tensors): it loads ``weights_only``."""
    path, rec = Path(path), _record(model, extra)
    cfg, build = rec.pop("config"), rec.pop("build")
    payload = rec | {"format": FORMAT, "config_json": json.dumps(cfg, sort_keys=True),
                     "build_json": json.dumps(build),
                     "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


SAFETENSORS = "model.safetensors"
META = "checkpoint.json"
_ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
              torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
              torch.bool: "BOOL"}


def _header(entries: list[tuple[str, torch.Tensor]], metadata: dict[str, str]) -> bytes:
    """The safetensors header (JSON, padded to 8 bytes) for ``entries`` written in order."""
    head: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for k, v in entries:
        if v.dtype not in _ST_DTYPES:
            raise ValueError(f"{k}: dtype {v.dtype} has no safetensors code")
        n = v.numel() * v.element_size()
        head[k] = {"dtype": _ST_DTYPES[v.dtype], "shape": list(v.shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(head, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)


def _whole(v: torch.Tensor) -> torch.Tensor:
    """A whole CPU tensor: a DTensor (FSDP2 shard) is all-gathered, a collective on every rank."""
    full = getattr(v, "full_tensor", None)
    return (full() if full is not None else v).detach().cpu().contiguous()


def save_pretrained_dir(model: nn.Module, path: str | os.PathLike, extra: Optional[dict] = None, *,
                        write: Optional[bool] = None, tokenizer: Any = None) -> Path:
    """An evaluation checkpoint as a directory: ``model.safetensors`` (streamed one tensor at a
    time, so under FSDP2 no rank ever holds more than one whole tensor, and no optimizer state)
    and ``checkpoint.json`` (format, family, config, class, build, plugins, ``extra``); ``hf:``
    families also get ``config.json`` and ``generation_config.json``, the ``save_pretrained``
    layout ``from_pretrained`` loads; with ``tokenizer`` (a ``tokenizers.Tokenizer`` or the path
    of its ``tokenizer.json``) the files ``AutoTokenizer.from_pretrained`` loads
    (:func:`tokenizer_files`). Collective under FSDP2 (every rank calls it; ``write``: default
    rank 0 writes). Atomic: written in a temp directory renamed into place."""
    path, rec = Path(path), _record(model, extra)
    tok_files = {} if tokenizer is None else tokenizer_files(tokenizer, rec["config"])
    dist = torch.distributed
    if write is None:
        write = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    hf = str(rec["family"]).startswith("hf:")
    meta = rec | {"format": FORMAT_DIR, "hf_layout": hf}
    # hf: families drop their "hf." prefix, so that the file is the save_pretrained layout
    entries = [(k.removeprefix("hf.") if hf else k, v) for k, v in model.state_dict().items()]
    if not write:
        for _, v in entries:
            _whole(v)  # take part in each gather
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        header = _header(entries, {"format": "pt"})
        with open(tmp / SAFETENSORS, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for _, v in entries:
                f.write(_whole(v).view(torch.uint8).numpy().tobytes() if v.numel() else b"")
        (tmp / META).write_text(json.dumps(meta, indent=1, sort_keys=True, default=_plain) + "\n")
        if hf:
            model.hf.config.to_json_file(str(tmp / "config.json"))
            if getattr(model.hf, "generation_config", None) is not None:
                model.hf.generation_config.to_json_file(str(tmp / "generation_config.json"))
        for name, text in tok_files.items():
            (tmp / name).write_text(text)
        os.chmod(tmp, 0o755)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_files(tokenizer: Any, config: dict[str, Any]) -> dict[str, str]:
    """The Hugging Face tokenizer files (:data:`TOKENIZER_FILES`, name -> text) of ``tokenizer``
    (a ``tokenizers.Tokenizer`` or the path of its ``tokenizer.json``) for a model of
    ``config``: the tokenizer itself, and its special tokens by the config's ids (``pad_id``,
    ``eos_id``, ``eoc_id``, ``mask_id``; our token texts where the config has no id). BOS and
    EOS are both the corpus's EOS, the document separator the model was trained after (the
    ``hf:`` families' ``bos_token_id``); ``[EOC]`` is an additional special token. A ValueError
    when the tokenizer has no EOS or more tokens than the model's ``vocab_size``."""
    from tokenizers import Tokenizer

    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.from_file(str(tokenizer))
    n, V = tok.get_vocab_size(with_added_tokens=True), config.get("vocab_size")
    if V is not None and n > int(V):
        raise UserError(f"the tokenizer has {n} tokens, more than the model's vocab_size {V}; "
                        "give the tokenizer the model was trained with")
    special = {}
    for name, text in SPECIAL_TEXT.items():
        i = config.get(f"{name}_id")
        found = tok.id_to_token(int(i)) if i is not None else text if tok.token_to_id(text) is not None else None
        if found is not None:
            special[name] = found
    if "eos" not in special:
        raise UserError(f"the tokenizer has no end-of-sequence token ({SPECIAL_TEXT['eos']} or the config's eos_id)")
    names = {"bos_token": special["eos"], "eos_token": special["eos"]}
    names |= {f"{k}_token": special[k] for k in ("pad", "mask") if k in special}
    names |= {"additional_special_tokens": [special["eoc"]]} if "eoc" in special else {}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", **names, "clean_up_tokenization_spaces": False}
    if config.get("max_seq_len"):
        cfg["model_max_length"] = int(config["max_seq_len"])
    return {"tokenizer.json": tok.to_str(pretty=True), "tokenizer_config.json": _json_text(cfg),
            "special_tokens_map.json": _json_text(names)}


def _json_text(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=1, sort_keys=True) + "\n"


def run_tokenizer(checkpoint: str | os.PathLike) -> Optional[Path]:
    """The ``tokenizer.json`` a checkpoint goes with: inside an exported directory, beside an
    older ``.pt``, else its run directory's (RUN_DIR/checkpoints/<name>, RUN_DIR/state/<name>);
    None where there is none."""
    ck = Path(checkpoint)
    return next((c for c in (ck / "tokenizer.json", ck.parent / "tokenizer.json", ck.parent.parent / "tokenizer.json")
                 if c.is_file()), None)


def _plain(x: Any) -> Any:
    """JSON for the non-JSON values an ``extra`` may hold (tensors, tuples are lists already)."""
    if torch.is_tensor(x):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not plain data; checkpoint extras hold numbers, strings, lists, dicts")


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The evaluation checkpoints in ``directory`` (RUN_DIR/checkpoints), sorted by name:
    checkpoint directories and older ``*.pt`` files."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [p for p in d.iterdir() if not p.name.startswith(".") and
             ((p.is_dir() and (p / META).is_file()) or (p.is_file() and p.suffix == ".pt"))]
    return sorted(found, key=lambda p: p.name)


def weights_file(path: str | os.PathLike) -> Path:
    """The file holding a checkpoint's weights: ``model.safetensors`` of a directory, else ``path``."""
    path = Path(path)
    return path / SAFETENSORS if path.is_dir() else path


def _read_dir(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(metadata, state dict) of a checkpoint directory, read without unpickling anything."""
    from safetensors.torch import load_file

    try:
        meta = json.loads((path / META).read_text())
        state = load_file(str(path / SAFETENSORS))
    except (OSError, ValueError) as exc:
        raise UserError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); it is incomplete "
                        "or not a checkpoint: use another one or retrain") from exc
    if meta.get("format") != FORMAT_DIR:
        raise UserError(f"{path / META} is not an interpscale checkpoint (format {FORMAT_DIR!r})")
    if meta.get("hf_layout"):
        state = {f"hf.{k}": v for k, v in state.items()}
    return meta, state


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
                           base=build.get("base"), **build.get("overrides", {}))
    overrides = {k: v for k, v in cfg.items() if k not in ("family", "size")}
    return get_family(family).builder(cfg["size"], data=DataFields(), **overrides)


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> tuple[nn.Module, dict]:
    """``(model, extra)``: the model rebuilt from its saved config with the weights loaded, from a
    checkpoint directory or an older ``.pt`` file; a ValueError when it is not a model
    checkpoint or its weights do not match its config."""
    path = Path(path)
    if path.is_dir() and (path / META).is_file():
        meta, state = _read_dir(path)
    elif path.is_file():
        meta, state = _read_pt(path, map_location)
    else:
        raise FileNotFoundError(f"no checkpoint at {path}")
    cfg = meta["config"]
    plugins.load_plugins(meta.get("plugins") or ())  # before the family lookup
    model = _rebuild(meta["family"], cfg, meta.get("class", ""), meta.get("build"))
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: saved {tuple(state[k].shape)} vs config {tuple(own[k].shape)}"
              for k in sorted(set(own) & set(state)) if state[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        raise UserError(f"checkpoint {path} does not match its config ({meta['family']}/{cfg.get('size')}): "
                        f"missing={missing[:5]} unexpected={unexpected[:5]} shape mismatches={shapes[:5]}")
    model.load_state_dict(state, strict=True)
    model.to(map_location if isinstance(map_location, (str, torch.device)) else "cpu")
    return model, dict(meta.get("extra") or {})


def _read_pt(path: Path, map_location: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(metadata as a directory's, state dict) of an older ``.pt`` checkpoint, unpickled with
    ``weights_only=True``."""
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError, KeyError, IndexError) as exc:  # truncated, not a
        # zip, unreadable, or bytes the restricted unpickler cannot follow (a text file: KeyError on its memo)
        why = f"{type(exc).__name__}: {str(exc).split('. ')[0] or 'empty file'}" if isinstance(exc, (RuntimeError, OSError, EOFError)) \
            else "not a torch checkpoint file"  # (the restricted unpickler's KeyError / IndexError say nothing more)
        raise UserError(f"checkpoint {path} cannot be read ({why}); "
                        "it is truncated or not a checkpoint: use another one or retrain") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(f"{path} is not an interpscale model checkpoint (format {FORMAT!r})")
    build = json.loads(payload.get("build_json") or "null")
    return payload | {"config": json.loads(payload["config_json"]), "build": build}, payload["state_dict"]
