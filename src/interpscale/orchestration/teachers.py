"""Frozen teachers for the CoCoMix families: train the teacher's SAE, save both, and attach
them to a student built from a run's overrides (the model itself never reads a file).

``prepare_cocomix_teacher`` returns the overrides (``teacher_checkpoint``, ``sae_checkpoint``,
``teacher_size``, ``teacher_layer``, ``sae_width``) a RunSpec carries; the trainer calls
``attach_frozen`` after building or resuming a model, which loads them when the model
``needs_teacher``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from interpscale._atomic import atomic_path
from interpscale.models.checkpoint import load_checkpoint, save_checkpoint
from interpscale.models.types import Batch
from interpscale.models.zoo.mxd import TopKSAE
from interpscale.models.zoo.replace import capture_io, find_blocks
from interpscale.orchestration.replacement import fit_sparse_layer


def train_teacher_sae(teacher: nn.Module, layer: int, batches: list[Batch], *, width: int, k: int = 32,
                      steps: int = 500, lr: float = 1e-3, seed: int = 0) -> TopKSAE:
    """A TopK SAE on the output of the teacher's block ``layer - 1`` (L_con blocks in)."""
    block = find_blocks(teacher)[layer - 1]
    _, h = capture_io(teacher, block, batches)
    torch.manual_seed(seed)
    sae = TopKSAE(h.size(-1), width, min(k, width))
    fit_sparse_layer(sae, h, h, steps=steps, lr=lr, seed=seed)
    return sae.eval().requires_grad_(False)


def save_sae(sae: TopKSAE, layer: int, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        torch.save({"d": sae.d_in, "width": sae.width, "k": sae.k, "layer": layer, "state_dict": sae.state_dict()}, tmp)
    return Path(path)


def load_sae(path: str | os.PathLike) -> tuple[TopKSAE, int]:
    blob = torch.load(path, map_location="cpu", weights_only=True)
    sae = TopKSAE(blob["d"], blob["width"], blob["k"])
    sae.load_state_dict(blob["state_dict"])
    return sae.eval().requires_grad_(False), int(blob["layer"])


def prepare_cocomix_teacher(teacher: nn.Module, batches: list[Batch], out_dir: str | os.PathLike, *,
                            layer: Optional[int] = None, width: Optional[int] = None, k: int = 32,
                            steps: int = 500, seed: int = 0) -> dict[str, Any]:
    """Save a trained zoo model as the frozen teacher and train its SAE locally; returns
    the overrides that build a ``cocomix`` family on top of them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_layers, d = len(find_blocks(teacher)), teacher.config.d_model
    layer = layer or max(1, n_layers // 2)
    sae = train_teacher_sae(teacher, layer, batches, width=width or 8 * d, k=k, steps=steps, seed=seed)
    return {
        "teacher_checkpoint": str(save_checkpoint(teacher, out / "teacher.pt")),
        "sae_checkpoint": str(save_sae(sae, layer, out / "sae.pt")),
        "teacher_size": teacher.config.size, "teacher_layer": layer, "sae_width": sae.width,
    }


def load_teacher(extra: dict) -> dict[str, Any]:
    """``{"teacher", "sae", "sae_layer"}`` from a config's ``teacher_checkpoint`` / ``sae_checkpoint``."""
    if not extra.get("teacher_checkpoint"):
        raise ValueError("this model needs a frozen teacher, but its config has no teacher_checkpoint "
                         "(pass the overrides returned by prepare_cocomix_teacher())")
    teacher, _ = load_checkpoint(extra["teacher_checkpoint"])
    out: dict[str, Any] = {"teacher": teacher, "sae": None, "sae_layer": None}
    if extra.get("variant", "cocomix") == "cocomix":
        if not extra.get("sae_checkpoint"):
            raise ValueError("cocomix needs the teacher's SAE, but its config has no sae_checkpoint")
        out["sae"], out["sae_layer"] = load_sae(extra["sae_checkpoint"])
    return out


def attach_frozen(model: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """Load and attach the frozen teacher/SAE a model's config points to, when it needs one."""
    if not getattr(model, "needs_teacher", False):
        return model
    frozen = load_teacher(model.config.extra)
    model.attach_teacher(frozen["teacher"], frozen["sae"], sae_layer=frozen["sae_layer"])
    return model.to(device) if device is not None else model
