"""Loader for the bundled offline lm-eval tasks: the YAMLs' ``data_files`` resolved in this
folder (not the working directory) and the splits built directly, so nothing touches a
dataset hub or its cache."""

from __future__ import annotations

from pathlib import Path

from interpscale._jsonl import iter_jsonl

HERE = Path(__file__).resolve().parent


def load_local(data_files: dict | None = None, **_ignored):
    import datasets

    if not data_files:
        raise ValueError("bundled task YAML needs dataset_kwargs.data_files")
    splits = {}
    for split, rel in data_files.items():
        path = Path(rel) if Path(rel).is_absolute() else HERE / rel
        if not path.is_file():
            raise ValueError(f"task data file {path} does not exist")
        splits[split] = datasets.Dataset.from_list([row for _, row in iter_jsonl(path)])
    return datasets.DatasetDict(splits)


def mc_soft_score(doc: dict, results: list) -> dict:
    """Accuracy and App. J soft score of one question from the harness's per-choice results."""
    from interpscale.metrics.likelihood import soft_score

    lls = [float(r[0]) for r in results]
    gold = int(doc["answer"])
    return {"acc": float(lls.index(max(lls)) == gold), "soft_score": soft_score(lls, gold)}
