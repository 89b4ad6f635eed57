"""The orchestration subcommands through the real dispatcher."""

from interpscale.cli import main


def test_plan_prints_dry_run_table(capsys):
    assert main(["plan", "--preset", "paper", "--flops-per-s", "1e15"]) == 0
    out = capsys.readouterr().out
    assert "C_err_pct" in out and "86 runs" in out and "5B" in out


def test_plan_bad_preset_is_a_clear_error(capsys):
    assert main(["plan", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert main(["plan", "--preset", "demo", "--families", "gpt9"]) == 2
    assert "unknown family 'gpt9'" in capsys.readouterr().err


def test_train_evaluate_and_sweep_status(tmp_path, capsys, make_spec):
    spec = make_spec("ar", steps=6)
    run_dir = tmp_path / "sweep" / "runs" / spec.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(spec.to_json())
    assert main(["train", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "done" in out
    # stderr is not a terminal here: progress is plain lines (each segment's end), no bar redraws
    assert "\r" not in err and f"{spec.run_id} stable: step " in err, err
    assert main(["evaluate", str(run_dir)]) == 0
    assert "ar_ce" in capsys.readouterr().out
    (tmp_path / "sweep" / "sweep.json").write_text(f'["{spec.run_id}"]')
    assert main(["sweep", "status", "--out", str(tmp_path / "sweep")]) == 0
    assert "done" in capsys.readouterr().out
    assert main(["sweep", "collect", "--out", str(tmp_path / "sweep")]) == 0
    assert (tmp_path / "sweep" / "results.csv").exists()
    assert main(["evaluate", str(tmp_path / "missing")]) == 2


def test_interior_minima_summary():
    import pandas as pd

    from interpscale.pipeline import interior_minima

    df = pd.DataFrame({"family": ["ar"] * 6, "slice_flops": [1.0] * 3 + [2.0] * 3,
                       "params": [1, 2, 3] * 2, "annealed": [True] * 6,
                       "loss": [3.0, 2.0, 2.5, 1.0, 2.0, 3.0]})
    assert interior_minima(df) == {"ar C=1": "interior", "ar C=2": "edge"}
