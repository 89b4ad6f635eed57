"""``interpscale export CHECKPOINT --out DIR``: an evaluation checkpoint (a checkpoint directory,
an older ``.pt`` file, or a run's DCP resume / stable state) as a safetensors directory:
``model.safetensors`` + ``checkpoint.json``, for ``hf:`` families ``config.json`` +
``generation_config.json`` in the ``save_pretrained`` layout that
``AutoModelForCausalLM.from_pretrained(DIR)`` loads, and the run's tokenizer as the files
``AutoTokenizer.from_pretrained(DIR)`` loads, so ``lm_eval --model hf`` runs on DIR
(docs/models.md, "Exports")."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from interpscale._commands.options import checkpoint_path, out_dir  # checked before any work (docs/errors.md)
from interpscale.errors import UserError

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT", type=checkpoint_path, help="RUN_DIR/checkpoints/<name> (a directory), an older .pt checkpoint, "
                   "or RUN_DIR/state/<kind>_<step>_<segment> (a DCP state)")
    p.add_argument("--out", required=True, type=out_dir, help="directory to write (replaced if it exists)")
    p.add_argument("--tokenizer", metavar="PATH", help="the tokenizer.json the export holds, with its special "
                   "tokens (default: the run's RUN_DIR/tokenizer.json)")


def _from_dcp(state: Path):
    """The model of a DCP state (RUN_DIR/state/<name>), rebuilt from RUN_DIR's spec and data."""
    from interpscale.orchestration.checkpointer import MARKER, load_sharded
    from interpscale.orchestration.parallel import LossModule
    from interpscale.orchestration.spec import RunSpec
    from interpscale.orchestration.trainer import build_run_model, open_run_data, param_groups

    run_dir = state.parent.parent
    marker = json.loads((state / MARKER).read_text())
    spec = RunSpec.load(run_dir / "spec.json")
    model = build_run_model(spec, open_run_data(run_dir))
    import torch

    opt = torch.optim.AdamW(param_groups(model, spec.weight_decay), lr=spec.lr)
    load_sharded(LossModule(model), opt, state)
    return model, {"step": marker["step"], "segment": marker["segment"], "run_id": spec.run_id, "from_state": state.name}


def run(args: argparse.Namespace) -> int:
    from interpscale.data.tokenizer import load_tokenizer
    from interpscale.models import load_checkpoint
    from interpscale.models.checkpoint import run_tokenizer, save_pretrained_dir

    src = Path(args.checkpoint)
    if not src.exists():
        raise UserError(f"{src}: no such checkpoint")
    if src.is_dir() and (src / "COMPLETE").is_file():
        model, extra = _from_dcp(src)
    elif src.is_dir() and (src / ".metadata").is_file():
        raise UserError(f"{src}: a DCP state without its COMPLETE marker (a save cut short); export another one")
    else:
        model, extra = load_checkpoint(src)
    tok_path = args.tokenizer or run_tokenizer(src)
    tok = None if tok_path is None else load_tokenizer(tok_path, add_specials=False)
    if tok is None:
        log.warning("export %s: no tokenizer.json in its run directory; the export holds no tokenizer "
                    "(AutoTokenizer and lm_eval need one: pass --tokenizer PATH)", src)
    out = save_pretrained_dir(model, args.out, extra=extra, write=True, tokenizer=tok)
    log.info("exported %s (%s) to %s", src, model.config.family, out)
    return 0
