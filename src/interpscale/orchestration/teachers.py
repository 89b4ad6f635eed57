"""Frozen teachers for the CoCoMix families: train the teacher's SAE, save both, and attach
them to a student built from a run's overrides (the model itself never reads a file)."""

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
from interpscale.errors import UserError


def prepare_cocomix_teacher(teacher: nn.Module, batches: list[Batch], out_dir: str | os.PathLike, *,
                            layer: Optional[int] = None, width: Optional[int] = None, k: int = 32,
                            steps: int = 500, seed: int = 0) -> dict[str, Any]:
    """Save a trained zoo model as the frozen teacher and train a TopK SAE on the output of
    its block ``layer - 1`` (L_con blocks in); the overrides that build a ``cocomix`` family
    on top of them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    layer = layer or max(1, len(find_blocks(teacher)) // 2)
    _, h = capture_io(teacher, find_blocks(teacher)[layer - 1], batches)
    width = width or 8 * teacher.config.d_model
    torch.manual_seed(seed)
    sae = TopKSAE(h.size(-1), width, min(k, width))
    fit_sparse_layer(sae, h, h, steps=steps, seed=seed)
    blob = {"d": sae.d_in, "width": sae.width, "k": sae.k, "layer": layer, "state_dict": sae.state_dict()}
    with atomic_path(out / "sae.pt") as tmp:
        torch.save(blob, tmp)
    return {"teacher_checkpoint": str(save_checkpoint(teacher, out / "teacher.pt")),
            "sae_checkpoint": str(out / "sae.pt"), "teacher_size": teacher.config.size,
            "teacher_layer": layer, "sae_width": sae.width}


def attach_frozen(model: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """Load and attach the frozen teacher (and, for ``cocomix``, its SAE) a model's config
    points to, when it needs one."""
    if not getattr(model, "needs_teacher", False):
        return model
    extra = model.config.extra
    if not extra.get("teacher_checkpoint"):
        raise UserError("this model needs a frozen teacher, but its config has no teacher_checkpoint "
                        "(pass the overrides returned by prepare_cocomix_teacher())")
    teacher, _ = load_checkpoint(extra["teacher_checkpoint"])
    sae, sae_layer = None, None
    if extra.get("variant", "cocomix") == "cocomix":
        if not extra.get("sae_checkpoint"):
            raise UserError("cocomix needs the teacher's SAE, but its config has no sae_checkpoint")
        blob = torch.load(extra["sae_checkpoint"], map_location="cpu", weights_only=True)
        sae = TopKSAE(blob["d"], blob["width"], blob["k"])
        sae.load_state_dict(blob["state_dict"])
        sae, sae_layer = sae.eval().requires_grad_(False), int(blob["layer"])
    model.attach_teacher(teacher, sae, sae_layer=sae_layer)
    return model.to(device) if device is not None else model
