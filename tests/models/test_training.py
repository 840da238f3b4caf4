"""Training pieces, and a two-process DistributedDataParallel run on CPU (gloo)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import assert_resumes_as_unbroken

from models.train import collate, learning_rate, make_batches
from service.runtime.tokenizer import BOS_ID, EOS_ID, PAD_ID


def test_learning_rate_warms_up_then_decays():
    rates = [learning_rate(s, 256, warmup=100, scale=1.0) for s in (1, 50, 100, 400)]
    assert rates[0] < rates[1] < rates[2]
    assert rates[2] == pytest.approx(256**-0.5 * 100**-0.5)
    assert rates[3] == pytest.approx(rates[2] / 2)


def test_batches_cover_every_pair_once_within_the_token_budget():
    pairs = [([5] * (i % 37 + 1), [6] * (i % 23 + 1)) for i in range(500)]
    batches = make_batches(pairs, max_tokens=300, seed=3)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        longest = max(len(pairs[i][0]) + len(pairs[i][1]) + 2 for i in batch)
        assert len(batch) * longest <= 300 or len(batch) == 1
    assert make_batches(pairs, 300, seed=3) == batches != make_batches(pairs, 300, seed=4)


def test_collate_shifts_the_target_and_pads():
    batch = collate([([7, 8, 9], [10, 11]), ([7], [12, 13, 14])])
    assert batch["src"].tolist() == [[7, 8, 9, EOS_ID], [7, EOS_ID, PAD_ID, PAD_ID]]
    assert batch["tgt_in"].tolist() == [[BOS_ID, 10, 11, PAD_ID], [BOS_ID, 12, 13, 14]]
    assert batch["tgt_out"].tolist() == [[10, 11, EOS_ID, PAD_ID], [12, 13, 14, EOS_ID]]
    assert batch["tgt_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def _torchrun(args: list[str], cwd) -> subprocess.CompletedProcess:
    launcher = "-m torch.distributed.run --standalone --nproc_per_node 2 -m attnserve.cli"
    command = [sys.executable, *launcher.split(), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _tiny_corpus(tmp_path, translator_data):
    """The Bible dev split as both train and dev: a corpus a tiny run gets through quickly."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev"):
        for suffix in ("es", "en"):
            shutil.copy(translator_data / f"dev.{suffix}", data / f"{split}.{suffix}")
    return data


@pytest.mark.slow
def test_two_process_ddp_run_trains_resumes_and_ships(tmp_path, translator_data):
    from helpers import ROOT

    data = _tiny_corpus(tmp_path, translator_data)
    run, out = tmp_path / "run", tmp_path / "out"
    common = [
        "train",
        "translator",
        "--preset",
        "tiny",
        "--vocab-size",
        "512",
        "--data",
        str(data),
        "--run-dir",
        str(run),
        "--out",
        str(out),
        "--max-tokens",
        "600",
        "--dev-sentences",
        "4",
        "--threads",
        "1",
        "--checkpoint-every",
        "2",
    ]
    first = _torchrun([*common, "--max-steps", "3"], ROOT)
    assert first.returncode == 0, first.stderr[-3000:]
    state = torch.load(run / "last.pt", weights_only=False)
    assert state["progress"]["step"] == 3

    averaged = ["--average", "3", "--snapshot-every", "2"]
    second = _torchrun([*common, *averaged, "--max-steps", "200", "--max-epochs", "1"], ROOT)
    assert second.returncode == 0, second.stderr[-3000:]
    state = torch.load(run / "last.pt", weights_only=False)
    progress = state["progress"]
    assert progress["epoch"] == 1 and 3 < progress["step"] < 200  # resumed, one epoch
    assert progress["history"][0]["dev_bleu"] >= 0
    assert (out / "model.safetensors").exists() and (out / "tokenizer.model").exists()
    snapshots = sorted(p.name for p in (run / "snapshots").glob("*.pt"))
    assert len(snapshots) == 3  # the last three kept
    shipped = json.loads((out / "training.json").read_text())["shipped"]
    assert shipped["weights"] in ("best.pt", snapshots) and shipped["dev_bleu"] >= 0


def test_the_mean_of_snapshots_is_the_mean_of_their_weights(tmp_path):
    from models.train import average_weights

    for i, value in enumerate((1.0, 2.0, 6.0)):
        weights = {"w": torch.full((2, 2), value), "b": torch.tensor([value, -value])}
        torch.save({"model": weights, "step": i}, tmp_path / f"step-{i}.pt")
    mean = average_weights(sorted(tmp_path.glob("*.pt")))
    assert torch.equal(mean["w"], torch.full((2, 2), 3.0))
    assert torch.equal(mean["b"], torch.tensor([3.0, -3.0])) and mean["b"].dtype == torch.float32


def _tiny_training(data, out) -> list[str]:
    """`attnserve train translator` of the tiny preset on `data`, a checkpoint every 2 steps."""
    model = ["--preset", "tiny", "--vocab-size", "512", "--data", str(data), "--out", str(out)]
    steps = ["--max-tokens", "600", "--dev-sentences", "4", "--checkpoint-every", "2"]
    return ["train", "translator", *model, *steps, "--threads", "1"]


def test_a_packed_run_goes_on_elsewhere_where_it_stopped(tmp_path, translator_data):
    from attnserve.cli import main
    from models.run_state import pack_run, unpack_run

    data = _tiny_corpus(tmp_path, translator_data)
    common = _tiny_training(data, tmp_path / "out")
    first, second = tmp_path / "first", tmp_path / "second"
    assert main([*common, "--run-dir", str(first), "--max-steps", "2"]) == 0
    packed = tmp_path / "run.pt"
    assert main([*common, "--run-dir", str(first), "--pack", str(packed)]) == 0
    original = torch.load(first / "last.pt", weights_only=False)
    # the matrices travel as int8 with a scale per row: a fraction of the fp32 state's size
    assert packed.stat().st_size < 0.4 * (first / "last.pt").stat().st_size
    tied = torch.load(packed, weights_only=False)["modules"]["model"]["output.weight"]
    assert tied == {"same_as": "source_embedding.weight"}  # shared embeddings kept once
    with pytest.raises(FileExistsError):
        unpack_run(packed, first)

    assert unpack_run(packed, second) == {"step": 2}
    resumed = torch.load(second / "last.pt", weights_only=False)
    assert resumed["progress"]["step"] == 2 and "optimizer" not in resumed
    assert resumed["progress"]["best_bleu"] == -1.0  # no best.pt travels: the best starts again
    assert (second / "tokenizer.model").read_bytes() == (first / "tokenizer.model").read_bytes()
    for name, weights in original["model"].items():
        error = (resumed["model"][name] - weights).abs().max().item()
        assert error <= weights.abs().max().item() / 127 * 0.51 + 1e-3, name
    (second / "last.pt").unlink()

    assert (
        main([*common, "--run-dir", str(second), "--resume-from", str(packed), "--max-steps", "4"])
        == 0
    )
    state = torch.load(second / "last.pt", weights_only=False)
    assert state["progress"]["step"] == 4 and "optimizer" in state
    assert pack_run(second, tmp_path / "again.pt")["step"] == 4


def test_a_run_s_weights_files_are_evaluated_and_translated(tmp_path, translator_data, capsys):
    from attnserve.cli import main
    from models.run_state import load_run_weights

    data = _tiny_corpus(tmp_path, translator_data)
    run = tmp_path / "run"
    snapshots = ["--average", "2", "--snapshot-every", "2", "--run-dir", str(run)]
    assert main([*_tiny_training(data, tmp_path / "out"), *snapshots, "--max-steps", "4"]) == 0
    snapshot = sorted((run / "snapshots").glob("step-*.pt"))[-1]
    assert "model_config" in torch.load(snapshot, weights_only=False)  # no last.pt to read
    last = torch.load(run / "last.pt", weights_only=False)["model"]
    for path in (run / "last.pt", snapshot):
        model, tokenizer = load_run_weights(path)
        assert tokenizer.vocab_size == model.config.vocab_size == 512
        assert not model.training
    model, _ = load_run_weights(snapshot)  # step 4: the same weights as last.pt
    assert all(torch.equal(model.state_dict()[k], v.float()) for k, v in last.items())
    capsys.readouterr()
    evaluate = [
        "evaluate",
        "translator",
        "--data",
        str(data),
        "--split",
        "dev",
        "--limit",
        "3",
        "--max-length",
        "8",
        "--checkpoint",
        str(snapshot),
        "--json",
    ]
    assert main(evaluate) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["parts"]["dev"]["sentences"] == 3 and report["parts"]["dev"]["bleu"] >= 0
    translate = [
        "translate",
        "--engine",
        "torch",
        "--checkpoint",
        str(snapshot),
        "--max-length",
        "8",
        "--json",
        "uno dos",
    ]
    assert main(translate) == 0  # the snapshot decodes as a shipped checkpoint would
    (translation,) = json.loads(capsys.readouterr().out)["translations"]
    assert translation["source"] == "uno dos"


@pytest.mark.slow
def test_a_resumed_run_trains_as_the_unbroken_run_would(tmp_path, translator_data):
    from models.config import PRESETS
    from models.train import Trainer, TrainOptions

    data = _tiny_corpus(tmp_path, translator_data)

    def leg(run: str, steps: int) -> Trainer:
        options = TrainOptions(
            data_dir=data,
            run_dir=tmp_path / run,
            out_dir=tmp_path / f"{run}-out",
            model=PRESETS["tiny"],  # dropout 0.1: every step draws its masks
            vocab_size=512,
            max_tokens=600,
            max_steps=steps,
            checkpoint_every=2,
            dev_sentences=2,
            threads=1,
        )
        trainer = Trainer(options)
        trainer.train()
        return trainer

    assert_resumes_as_unbroken(leg)
