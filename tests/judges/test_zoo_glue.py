"""metrics/checkpoint_judging.py glue with a tiny real zoo model, and the `interpscale judge` CLI."""

import json

import pytest

torch = pytest.importorskip("torch")

from interpscale.cli import main  # noqa: E402
from interpscale.judges import ConceptCard, LexicalJudge, run_steering_benchmark  # noqa: E402
from judge_server import ServerReply  # noqa: E402

WORDS = ("the a and of to in we it was is on bicycle peloton cyclist sprint tour bread flour yeast oven dough "
         "volcano lava magma eruption ash").split()
V = 64


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = ["[PAD]", "[EOS]", "[EOC]", "[MASK]"] + WORDS
    vocab += [f"w{i}" for i in range(V - len(vocab))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[PAD]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(vocab[:4])
    return tok


@pytest.fixture(scope="module")
def zoo():
    from interpscale.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("ar+concept", "tiny", n_concepts=8, vocab_size=V)
    return model, _tokenizer()


def test_concept_top_tokens_are_topk_of_W_K(zoo):
    from interpscale.metrics.checkpoint_judging import concept_top_tokens

    model, tok = zoo
    top = concept_top_tokens(model, tok, k=5)
    assert len(top) == 8 and all(len(row) == 5 for row in top)
    scores = model.concept.known_emb.detach() @ model.lm_head.detach().T  # [n, V]
    scores[:, :4] = float("-inf")  # special tokens never count
    want = [[tok.id_to_token(i) for i in row] for row in scores.topk(5, dim=1).indices.tolist()]
    assert top == want


def test_zoo_generator_conditions(zoo):
    from interpscale.metrics.checkpoint_judging import ZooGenerator, concept_top_tokens

    model, tok = zoo
    top = concept_top_tokens(model, tok, k=3)
    cards = [ConceptCard(f"concept {i}", "a learned concept", tuple(top[i])) for i in range(3)]
    gen = ZooGenerator(model, tok, cards, temperature=0.0)
    plain = gen("the bicycle and", card=None, strength=None, max_new_tokens=12, seed=0)
    steered = gen("the bicycle and", card=cards[1], strength=50.0, max_new_tokens=12, seed=0)
    gentle = gen("the bicycle and", card=cards[1], strength=0.01, max_new_tokens=12, seed=0)
    assert steered.split() == [top[1][0]] * 12  # a huge τ forces the concept's top token (Eq. 18-19)
    assert plain.split() != steered.split() and gentle.split() == plain.split()
    assert gen("the bicycle and", card=None, strength=None, max_new_tokens=12, seed=0) == plain  # deterministic
    with pytest.raises(ValueError, match="not in this model"):
        gen("the", card=ConceptCard("unknown", "x"), strength=1.0, max_new_tokens=4, seed=0)
    with pytest.raises(ValueError, match="concept cards but the model has 8"):
        ZooGenerator(model, tok, [ConceptCard(f"c{i}", "d") for i in range(9)])


def test_benchmark_end_to_end_with_a_zoo_model(zoo):
    from interpscale.metrics.checkpoint_judging import ZooGenerator, concept_top_tokens

    model, tok = zoo
    top = concept_top_tokens(model, tok, k=3)
    cards = [ConceptCard(f"concept {i}", "a learned concept", tuple(top[i])) for i in range(4)]
    gen = ZooGenerator(model, tok, cards, temperature=0.0)
    res = run_steering_benchmark(gen, cards, ["the a and", "we it was", "of to in", "is on the"], judge=LexicalJudge(),
                                 n_concepts=3, strengths=(50.0,), max_new_tokens=8, seed=0)
    c = res.conditions
    assert c["steered"].concept == 2.0 and c["unsteered"].concept < 1.0
    assert c["steered"].quality == 0.0  # one token repeated: the quality cost of over-steering
    assert c["steered"].n_samples == 3 * 4 and res.config["n_concepts"] == 3


def _run_dir(tmp_path, zoo):
    from interpscale.metrics.checkpoint_judging import concept_top_tokens
    from interpscale.models import save_checkpoint

    model, tok = zoo
    rd = tmp_path / "run"
    (rd / "checkpoints").mkdir(parents=True)
    tok.save(str(rd / "tokenizer.json"))
    top = concept_top_tokens(model, tok, k=4)
    cards = [{"label": f"concept {i}", "description": "learned", "words": top[i][:2] if i % 2 == 0 else ["zzz"]}
             for i in range(4)]
    (rd / "concepts.json").write_text(json.dumps(cards))
    save_checkpoint(model, rd / "checkpoints" / "step_10.pt", extra={"step": 10})
    return rd


def test_cli_alignment_from_a_checkpoint(tmp_path, zoo, capsys):
    rd = _run_dir(tmp_path, zoo)
    out = tmp_path / "out"
    assert main(["judge", "alignment", "--checkpoint", str(rd / "checkpoints" / "step_10.pt"), "--k", "4",
                 "--out", str(out)]) == 0
    res = json.loads((out / "alignment.json").read_text())
    assert res["backend"] == "lexical" and "offline lexical backend" in (out / "alignment.md").read_text()
    # concepts whose card words are their own top tokens align; the others do not
    assert [r["score"] for r in res["records"]] == [4.0, 1.0, 4.0, 1.0]  # 2 of 4 tokens are concept words
    assert "offline lexical backend" in capsys.readouterr().out


def test_cli_steering_from_a_checkpoint_over_http(tmp_path, zoo, serve):
    rd = _run_dir(tmp_path, zoo)
    srv = serve(lambda body, n: ServerReply("Rating: [[2]]"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the a and\nwe it was\n")
    out = tmp_path / "out"
    args = ["judge", "steering", "--checkpoint", str(rd / "checkpoints" / "step_10.pt"), "--prompts", str(prompts),
            "--n-concepts", "2", "--strengths", "1,20", "--max-new-tokens", "6", "--base-url", srv.url,
            "--model", "judge", "--out", str(out)]
    assert main(args) == 0
    res = json.loads((out / "steering.json").read_text())
    assert res["backend"] == "llm" and res["conditions"]["steered"]["concept"] == 2.0
    assert len(res["selected_strengths"]) == 2 and "judge at http://127.0.0.1" in (out / "steering.md").read_text()
    n = srv.n_requests
    assert main(args) == 0  # rerun: generations and judgements come back from disk
    assert srv.n_requests == n


def test_cli_inputs_relevance_and_errors(tmp_path, capsys):
    rel = tmp_path / "rel.jsonl"
    rel.write_text(json.dumps({"text": "Lava and ash.", "candidates": [{"label": "volcanoes", "description": "x",
                                                                       "words": ["lava", "ash"]}]}) + "\n")
    assert main(["judge", "relevance", "--input", str(rel)]) == 0
    assert "| 1 | 3.000 | 1.000 | 0 | 0 |" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"label": "x"}\n')
    assert main(["judge", "alignment", "--input", str(bad)]) == 2
    assert f"{bad}: line 1: 'tokens' must be a non-empty list of strings" in capsys.readouterr().err
    steer = tmp_path / "s.jsonl"
    steer.write_text(json.dumps({"label": "volcanoes", "prompt": "p", "continuation": "lava lava ash",
                                 "condition": "steered"}) + "\n")
    req = tmp_path / "requests.jsonl"
    assert main(["judge", "steering", "--input", str(steer), "--model", "judge-m", "--batch-write", str(req),
                 "--cache", str(tmp_path / "c.sqlite")]) == 0
    assert len(req.read_text().splitlines()) == 2 and "--batch-read" in capsys.readouterr().out
    # the Batch service's answers come back as an output file; --batch-read joins them on custom_id
    lines = [json.loads(line) for line in req.read_text().splitlines()]
    out_file = tmp_path / "batch_out.jsonl"
    out_file.write_text("".join(json.dumps({
        "custom_id": line["custom_id"], "error": None,
        "response": {"status_code": 200, "body": {"choices": [{"message": {"content": "Rating: [[2]]"}}]}}}) + "\n"
        for line in lines))
    out = tmp_path / "out"
    assert main(["judge", "steering", "--input", str(steer), "--model", "judge-m", "--batch-read", str(out_file),
                 "--cache", str(tmp_path / "c.sqlite"), "--out", str(out)]) == 0
    res = json.loads((out / "steering.json").read_text())
    assert res["conditions"]["steered"]["concept"] == 2.0 and res["conditions"]["steered"]["quality"] == 2.0


def test_predicted_concept_relevance_from_a_checkpoint(tmp_path, zoo, capsys):
    from interpscale.metrics.checkpoint_judging import predicted_concepts

    model, tok = zoo
    model.eval()
    preds = predicted_concepts(model, tok, ["the bicycle and the tour", "lava and ash"], top=2)
    with torch.no_grad():
        ids = tok.encode("lava and ash").ids
        act = model(torch.tensor([ids])).known_act[0].max(0).values
    assert preds[1] == act.topk(2).indices.tolist() and len(preds[0]) == 2
    rd = _run_dir(tmp_path, zoo)
    (rd / "concepts.json").write_text(json.dumps([{"label": f"concept {i}", "description": "d", "words": ["lava"]}
                                                  for i in range(8)]))
    rows = tmp_path / "chunks.jsonl"
    rows.write_text(json.dumps({"text": "lava and ash"}) + "\n" + json.dumps({"text": "the tour"}) + "\n")
    out = tmp_path / "out"
    assert main(["judge", "relevance", "--checkpoint", str(rd / "checkpoints" / "step_10.pt"), "--input", str(rows),
                 "--top", "2", "--out", str(out)]) == 0
    res = json.loads((out / "relevance.json").read_text())
    assert [[r["score"] for r in row] for row in res["records"]] == [[2.0, 2.0], [1.0, 1.0]]
    assert [r["meta"]["concept"] for r in res["records"][0]] == [f"concept {i}" for i in preds[1]]
