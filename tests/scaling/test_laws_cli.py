"""`interpscale fit law LAW FILE ...`: the published laws on external tables through cli.main."""

import json

import pandas as pd
import pytest

from interpscale import cli

LADDER = "scaling_public/olmo_ladder_bhagia2024/ladder_runs.csv.gz"


def test_ladder_on_per_step_logs(reference_data, tmp_path, capsys):
    # the eight ladder runs of two sizes are enough for the CLI path; the published numbers are test_ladder's
    d = pd.read_csv(reference_data(LADDER), dtype=str, keep_default_na=False)
    d = d[d.run.str.match(r"^(190M|370M|760M|1B)-")]
    src = tmp_path / "ladder.csv"
    d.to_csv(src, index=False)
    out = tmp_path / "ladder.json"
    rc = cli.main(["fit", "law", "ladder", str(src), "--params", "params", "--tokens", "throughput/total_tokens",
                   "--loss", "eval/downstream_bpb/hellaswag_val_rc_5shot_bpb",
                   "--metric", "eval/downstream/hellaswag_val_rc_5shot_len_norm", "--run", "run", "--step", "_step",
                   "--tokens-per-step", "batch_size_in_tokens", "--last", "5", "--n-boot", "20", "--out", str(out)])
    assert rc == 0
    saved = json.loads(out.read_text())
    assert saved["law"] == "ladder" and saved["n_runs"] == 16 and saved["last"] == 5
    assert saved["fit"]["step1"]["params"]["alpha"] == pytest.approx(0.19553941, rel=1e-4)  # as test_ladder's fit
    assert saved["fit"]["step2"]["params"]["k"] > 0
    assert "ladder-step2" in capsys.readouterr().out


def test_data_constrained_and_overtraining(reference_data, tmp_path, capsys):
    dc = reference_data("scaling_public/datablations_muennighoff2023/datablations_fit182.csv")
    rc = cli.main(["fit", "law", "data-constrained", str(dc), "--params", "N", "--tokens", "D", "--unique-tokens", "U",
                   "--loss", "loss", "--n-boot", "0", "--out", str(tmp_path)])
    assert rc == 0
    saved = json.loads((tmp_path / "data-constrained.json").read_text())
    assert saved["fit"]["objective"] == pytest.approx(0.0158046625, rel=1e-6)
    ot = reference_data("scaling_public/overtraining_gadre2024/gadre_runs.csv")
    rc = cli.main(["fit", "law", "overtraining", str(ot), "--params", "N", "--tokens", "D", "--loss", "loss_c4_val",
                   "--metric", "err_avg_subset", "--recipe", "robust", "--n-boot", "0"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "downstream-error" in out
    from interpscale.scaling.laws import fit_law_table

    res = fit_law_table("overtraining", ot, params="N", tokens="D", loss="loss_c4_val", metric="err_avg_subset",
                        recipe="robust", n_boot=0)
    assert out.endswith(res.summary() + "\n")  # the library result prints what the command prints


def test_bad_column_is_one_line_and_exit_2(tmp_path, capsys):
    src = tmp_path / "runs.csv"
    src.write_text("N,D,L\n1e8,1e9,3.1\n2e8,2e9,oops\n")
    rc = cli.main(["fit", "law", "chinchilla", str(src), "--params", "N", "--tokens", "D", "--loss", "L"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs.csv, line 3: column 'L' (--loss) has 'oops'" in err[0]
    rc = cli.main(["fit", "law", "data-constrained", str(src), "--params", "N", "--tokens", "D", "--loss", "L"])
    assert rc == 2 and "--unique-tokens" in capsys.readouterr().err


def test_plan_with_a_unique_token_budget(reference_data, tmp_path, capsys):
    dc = reference_data("scaling_public/datablations_muennighoff2023/datablations_fit182.csv")
    assert cli.main(["fit", "law", "data-constrained", str(dc), "--params", "N", "--tokens", "D", "--unique-tokens", "U",
                     "--loss", "loss", "--n-boot", "0", "--out", str(tmp_path / "dc.json")]) == 0
    csv = tmp_path / "plan.csv"
    rc = cli.main(["plan", "--preset", "demo-quick", "--device", "h100", "--unique-tokens", "2e4",
                   "--repetition-law", str(tmp_path / "dc.json"), "--csv", str(csv)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "repeated data: 2e+04 unique tokens" in out and "R_D* = 95.37" in out
    t = pd.read_csv(csv)
    assert (t.epochs == t.D / t.D.clip(upper=2e4)).all()
    assert (t.epoch_cost[t.epochs > 1] > 0).all() and (t.epoch_cost[t.epochs == 1] == 0).all()
