"""``data prepare --executor slurm`` on a real SLURM cluster (scripts/local-slurm.sh start):
tokenizer job, one array task per input file, finalization job."""

import json

import pytest

from interpscale.data import prepare


pytestmark = pytest.mark.slurm  # skipped with the reason when no cluster answers (tests/conftest.py)


def test_prepare_as_slurm_jobs_equals_inline(tmp_path):
    files = []
    for i in range(2):
        files.append(tmp_path / f"in{i}.jsonl")
        docs = [{"chunks": [{"text": f"file {i} doc {d} about rain", "concepts": ["rain"]}]} for d in range(30)]
        files[-1].write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    slurm = {"timeout_min": 10, "cpus_per_task": 1, "mem_gb": 1, "max_array_size": 1}  # two arrays
    a = prepare(files, tmp_path / "a", executor="slurm", slurm=slurm, max_parallel=2, vocab_size=100,
                val_fraction=0.2)
    b = prepare(files, tmp_path / "b", vocab_size=100, val_fraction=0.2)
    for f in ("tokenizer.json", "train.tokens.bin", "val.tokens.bin", "train.label_ids.npy", "concepts.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes()
    assert not (a / ".parts").exists() and not (a / ".submitit").exists()
    # bad input in a task: the error names the file and line, the other task's part is kept
    files[1].write_text('{"text": "ok"}\n{broken\n')
    with pytest.raises(ValueError, match=r"in1\.jsonl: line 2 is not valid JSON"):
        prepare(files, tmp_path / "c", executor="slurm", slurm=slurm, tokenizer=a / "tokenizer.json")
    assert (tmp_path / "c" / ".parts" / "00000.json").exists()
