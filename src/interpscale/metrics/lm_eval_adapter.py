"""lm-evaluation-harness adapter: importing it registers the ``lm_eval.api.model.LM`` classes
``interpscale-ar`` / ``interpscale-diffusion`` (model args: ``_InterpscaleLM``); :func:`run_lm_eval`
runs the bundled offline tasks (``tasks/``)."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing is fetched from a hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.api.model import LM  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from interpscale._atomic import atomic_write_text  # noqa: E402
from interpscale._jsonl import jsonable  # noqa: E402
from interpscale.data.tokenizer import load_tokenizer  # noqa: E402
from interpscale.errors import UserError  # noqa: E402
from interpscale.metrics._common import family_name, generate_text, is_diffusion, special_id  # noqa: E402
from interpscale.metrics.likelihood import encode_pair, loglikelihood, max_length  # noqa: E402

TASKS_DIR = Path(__file__).with_name("tasks")
# args the harness itself passes to every model class; they mean nothing here
HARNESS_ARGS = frozenset({"max_batch_size", "dtype", "trust_remote_code", "parallelize"})


def find_tokenizer(checkpoint: Union[str, Path]) -> Path:
    """The checkpoint's tokenizer.json (``models.checkpoint.run_tokenizer``): inside an export,
    beside X.pt, else RUN_DIR/tokenizer.json for RUN_DIR/checkpoints/X."""
    from interpscale.models.checkpoint import run_tokenizer

    found = run_tokenizer(checkpoint)
    if found is None:
        ck = Path(checkpoint)
        raise UserError(f"no tokenizer.json found in or next to {ck} or in its run directory {ck.parent.parent}; "
                        f"pass tokenizer=PATH in model_args")
    return found


def _load(path, model: Optional[torch.nn.Module], tokenizer: Any, device: Optional[str], who: str):
    """The model (from the checkpoint ``path`` unless given) and its tokenizer (path or object)."""
    if model is None:
        if path is None:
            raise UserError(f"{who}: give pretrained=CHECKPOINT (or a model object)")
        from interpscale.models import load_checkpoint

        model, _ = load_checkpoint(path, map_location=device or "cpu")
    elif device:
        model = model.to(device)
    if tokenizer is None:
        if path is None:
            raise UserError(f"{who}: pass tokenizer= with a model object")
        tokenizer = find_tokenizer(path)
    return model, tokenizer


class _InterpscaleLM(LM):
    """Model args: ``pretrained`` (a checkpoint; alias ``checkpoint``), ``tokenizer`` (default: the run's,
    :func:`find_tokenizer`), ``device``, ``batch_size``, ``n_samples`` (diffusion MC samples per request),
    ``seed``, ``max_gen_toks``."""

    DIFFUSION: bool = False
    NAME: str = ""

    def __init__(self, pretrained: Optional[str] = None, *, checkpoint: Optional[str] = None,
                 model: Optional[torch.nn.Module] = None, tokenizer: Any = None, device: Optional[str] = None,
                 batch_size: Union[int, str, None] = 16, n_samples: Union[int, str] = 32,
                 seed: Union[int, str] = 0, max_gen_toks: Union[int, str] = 64, **kwargs: Any) -> None:
        super().__init__()
        unknown = sorted(set(kwargs) - HARNESS_ARGS)
        if unknown:
            raise UserError(f"{self.NAME}: unknown model arg(s) {unknown}; accepted: pretrained, "
                            f"checkpoint, tokenizer, device, batch_size, n_samples, seed, max_gen_toks")
        model, tokenizer = _load(checkpoint or pretrained, model, tokenizer, device, self.NAME)
        if is_diffusion(model) != self.DIFFUSION:
            other = "interpscale-diffusion" if is_diffusion(model) else "interpscale-ar"
            raise UserError(f"{self.NAME} cannot score a {family_name(model)!r} checkpoint; use {other}")
        self.model, self.tok = model, load_tokenizer(tokenizer, add_specials=False)
        self._eos = special_id(model, "eos_id")  # the prepared corpus's EOS (pretrained tokenizers place it anywhere)
        self.batch_size = 16 if batch_size in (None, "auto") or str(batch_size).startswith("auto") else int(batch_size)
        self.n_samples, self.seed, self.max_gen_toks = int(n_samples), int(seed), int(max_gen_toks)

    # --- lm-eval API ------------------------------------------------------------
    def _ll(self, reqs):
        return loglikelihood(self.model, reqs, n_samples=self.n_samples, seed=self.seed, batch_size=self.batch_size)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        reqs = [encode_pair(self.tok, ctx, cont) for ctx, cont in (r.args for r in requests)]
        step = max(self.batch_size * 8, 64)
        out = []
        for s in tqdm(range(0, len(reqs), step), desc=f"{self.NAME} loglikelihood", disable=disable_tqdm):
            chunk = self._ll(reqs[s : s + step])
            for r, res in zip(requests[s : s + step], chunk):  # cached as each chunk is done: a killed
                self.cache_hook.add_partial("loglikelihood", r.args, res)  # run resumes after it
            out += chunk
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        # AR inputs hold max_len tokens (+1 predicted); diffusion inputs hold all of them.
        width = max_length(self.model) - (1 if self.DIFFUSION else 0)
        out = []
        for r in tqdm(requests, desc=f"{self.NAME} rolling", disable=disable_tqdm):
            (text,) = r.args[:1]
            ids = self.tok.encode(text, add_special_tokens=False).ids
            if not ids:
                out.append(0.0)
                continue
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                token_list=ids, prefix_token=self._eos, max_seq_len=width, context_len=1)]
            total = sum(ll for ll, _ in self._ll([(list(c), list(p)) for c, p in windows]))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
            out.append(total)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for r in tqdm(requests, desc=f"{self.NAME} generate", disable=disable_tqdm):
            context, gen_kwargs = r.args
            gen_kwargs = dict(gen_kwargs or {})
            until = gen_kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            n_new = int(gen_kwargs.pop("max_gen_toks", self.max_gen_toks))
            temperature = float(gen_kwargs.pop("temperature", 0.0))
            if not gen_kwargs.pop("do_sample", temperature > 0):
                temperature = 0.0
            ids = self.tok.encode(context, add_special_tokens=False).ids or [self._eos]
            text = generate_text(self.model, self.tok, ids, n_new, max_length(self.model),
                                 temperature=temperature, seed=self.seed)
            cuts = [text.index(stop) for stop in until if stop and stop in text]
            text = text[: min(cuts)] if cuts else text
            self.cache_hook.add_partial("generate_until", r.args, text)
            out.append(text)
        return out

    @property
    def tokenizer_name(self) -> str:
        return "interpscale"


@register_model("interpscale-ar")
class InterpscaleAR(_InterpscaleLM):  # AR checkpoints: exact log-likelihoods
    DIFFUSION, NAME = False, "interpscale-ar"


@register_model("interpscale-diffusion")
class InterpscaleDiffusion(_InterpscaleLM):  # diffusion: MC ELBO log-likelihoods with shared mask draws
    DIFFUSION, NAME = True, "interpscale-diffusion"


def task_manager(include_path: Sequence[Union[str, Path]] = (), *, include_defaults: bool = False):
    """A ``TaskManager`` over the bundled tasks (+ ``include_path``; lm-eval's own: ``include_defaults``)."""
    paths = [str(TASKS_DIR)] + [str(p) for p in include_path]
    if "include_defaults" in inspect.signature(TaskManager.__init__).parameters:
        return TaskManager(include_path=paths, include_defaults=include_defaults)
    return TaskManager(include_path=paths)


def run_lm_eval(checkpoint: Union[str, Path, None], tasks: Union[str, Sequence[str]], *,
                out_dir: Union[str, Path, None], limit: Union[int, float, None] = None,
                model: Optional[torch.nn.Module] = None, tokenizer: Any = None,
                include_path: Union[str, Path, Sequence[Union[str, Path]], None] = None,
                num_fewshot: Optional[int] = None, n_samples: int = 32, batch_size: int = 16,
                device: Optional[str] = None, seed: int = 0, bootstrap_iters: int = 100,
                allow_builtin: bool = True, resume: bool = True) -> dict[str, Any]:
    """Run lm-eval ``tasks`` (names or a comma list: the bundled offline tasks, lm-eval's built-in
    ones when ``allow_builtin`` and their data is offline) on a checkpoint or ``model`` +
    ``tokenizer``; writes ``out_dir/lm_eval_results.json`` and returns the harness's ``results``.
    With a checkpoint, an ``out_dir`` and ``resume``, every answered request is kept in the
    harness's request cache (``out_dir/lm_eval_cache``, :func:`request_cache`), so a killed run
    restarts where it stopped; a changed checkpoint or setting starts a fresh cache."""
    names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else [str(t) for t in tasks]
    names = [t for t in names if t]
    if not names:
        raise UserError("no lm-eval task named")
    extra = [] if include_path is None else ([include_path] if isinstance(include_path, (str, Path)) else list(include_path))
    tm = task_manager(extra, include_defaults=False)  # indexing lm-eval's own tasks takes ~20 s
    unknown = [t for t in names if t not in tm.all_tasks]
    if unknown and allow_builtin:
        tm = task_manager(extra, include_defaults=True)
        unknown = [t for t in names if t not in tm.all_tasks]
    if unknown:
        bundled = sorted(t for t in tm.all_tasks if t.startswith("interpscale"))
        raise UserError(f"unknown lm-eval task(s) {unknown}; bundled offline tasks: {bundled}")
    model, tokenizer = _load(checkpoint, model, tokenizer, device, "lm-eval")
    cls = InterpscaleDiffusion if is_diffusion(model) else InterpscaleAR  # the model is on ``device`` now
    lm = cls(model=model, tokenizer=tokenizer, n_samples=n_samples, batch_size=batch_size, seed=seed)
    cache = request_cache(out_dir, checkpoint, lm.NAME, n_samples=n_samples, seed=seed) \
        if resume and out_dir is not None and checkpoint is not None else None
    res = simple_evaluate(model=lm, tasks=names, task_manager=tm, limit=limit, num_fewshot=num_fewshot, use_cache=cache,
                          log_samples=False, bootstrap_iters=bootstrap_iters, random_seed=seed,
                          numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed)
    results = jsonable(res["results"])
    if out_dir is not None:  # the directory is made by the atomic write
        payload = {"checkpoint": None if checkpoint is None else str(checkpoint), "model": lm.NAME,
                   "tasks": names, "limit": limit, "n_samples": n_samples, "seed": seed,
                   "results": results, "versions": jsonable(res.get("versions", {})),
                   "n-samples": jsonable(res.get("n-samples", {}))}
        atomic_write_text(Path(out_dir) / "lm_eval_results.json",
                          json.dumps(payload, indent=2, sort_keys=True))
    return results


def request_cache(out_dir: Union[str, Path], checkpoint: Union[str, Path], model: str, **settings: Any) -> str:
    """The harness request-cache path (``use_cache``) of ``checkpoint`` under ``out_dir/lm_eval_cache``:
    named by a signature of the checkpoint's weights file (path, size, modification time) and
    the settings that change answers, so another checkpoint never reads it; caches of other
    signatures are removed."""
    from interpscale.models.checkpoint import weights_file

    w = weights_file(checkpoint)
    st = w.stat()
    key = json.dumps([str(w.resolve()), st.st_size, st.st_mtime_ns, model, sorted(settings.items())])
    sig = hashlib.sha256(key.encode()).hexdigest()[:16]
    d = Path(out_dir) / "lm_eval_cache"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("requests-*"):
        if not old.name.startswith(f"requests-{sig}_"):
            old.unlink(missing_ok=True)
    return str(d / f"requests-{sig}")
