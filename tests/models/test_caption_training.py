"""A tiny captioner training run (with resume), the evaluate command and the caption command
with its attention figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, assert_resumes_as_unbroken

from models.caption_train import (
    CaptionTrainer,
    CaptionTrainOptions,
    caption_vocabulary,
    train_captioner,
)
from models.config import CAPTIONER_PRESETS


def _tiny_options(data, base, **changes) -> CaptionTrainOptions:
    """The tiny preset's training on the small data set, one thread, into `base`."""
    return CaptionTrainOptions(
        data_dir=data,
        run_dir=base / "run",
        out_dir=base / "shipped",
        model=CAPTIONER_PRESETS["tiny"],
        batch_size=16,
        threads=1,
        **changes,
    )


@pytest.fixture(scope="module")
def tiny_run(small_captioner_data, tmp_path_factory):
    data, _ = small_captioner_data
    base = tmp_path_factory.mktemp("captioner-run")
    options = _tiny_options(data, base, max_steps=30, learning_rate=5e-3, checkpoint_every=5)
    train_captioner(options)
    first = json.loads((base / "shipped" / "training.json").read_text())
    options.max_steps = 60  # resumes from step 30
    train_captioner(options)
    return data, base, first


@pytest.mark.slow
def test_a_leg_stops_early_and_the_next_goes_on(small_captioner_data, tmp_path):
    data, _ = small_captioner_data
    # a leg of one step's time: it ends after its first step
    options = _tiny_options(data, tmp_path, max_steps=8, leg_minutes=1e-4)
    assert train_captioner(options) is None  # the budget is not spent: nothing shipped
    assert not (tmp_path / "shipped").exists() and (tmp_path / "run" / "last.pt").exists()
    options.leg_minutes = 0.0  # the rest of the budget
    assert train_captioner(options) == tmp_path / "shipped"
    history = json.loads((tmp_path / "shipped" / "training.json").read_text())["history"]
    assert history[0]["step"] < 8 and history[-1]["step"] == 8  # a dev score at each leg's end
    assert set(history[-1]["dev_parts"]) == {"seen", "held_out_family"}


@pytest.mark.slow
def test_a_resumed_run_trains_as_the_unbroken_run_would(small_captioner_data, tmp_path):

    data, _ = small_captioner_data
    # dropout, random convolutions and MixStyle all draw; the schedule follows the steps
    augmented = dict(rand_conv=0.5, mixstyle=0.5, decay_steps=10, evaluate_every=0)

    def leg(run: str, steps: int) -> CaptionTrainer:
        options = _tiny_options(data, tmp_path / run, max_steps=steps, **augmented)
        trainer = CaptionTrainer(options)
        trainer.train()
        return trainer

    assert_resumes_as_unbroken(leg)


def _cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnserve.cli", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_training_resumes_and_ships_a_small_checkpoint(tiny_run):
    data, base, first = tiny_run
    summary = json.loads((base / "shipped" / "training.json").read_text())
    assert first["history"][-1]["step"] == 30
    # 25 batches an epoch: epoch ends and budget ends, the second run after the first
    assert [h["step"] for h in summary["history"]] == [25, 30, 50, 60]
    assert (base / "shipped" / "model.safetensors").stat().st_size < 2**20
    # the trained model explains training captions better than the same model untrained
    import torch

    from models.caption_data import read_scenes
    from models.caption_train import batch_tensors, caption_loss
    from models.captioner import Captioner
    from models.checkpoint import load_checkpoint
    from service.runtime.tokenizer import Tokenizer

    trained, _ = load_checkpoint(base / "shipped")
    torch.manual_seed(1)  # the trainer's seed: the initial weights of the run
    untrained = Captioner(trained.config).eval()
    scenes, images = read_scenes(data, "train")
    tokenizer = Tokenizer(base / "shipped" / "tokenizer.model")
    batch = batch_tensors(images[:64], tokenizer.encode_batch([s.caption for s in scenes[:64]]))
    with torch.no_grad():
        after = float(caption_loss(trained, batch)[1])
        before = float(caption_loss(untrained, batch)[1])
    assert after < before - 0.1, (before, after)
    config = json.loads((base / "shipped" / "config.json").read_text())
    assert config["vocab_size"] == len(caption_vocabulary(data)) + 4


@pytest.mark.slow
def test_evaluate_reports_every_part_and_the_goals(tiny_run):
    data, base, _ = tiny_run
    done = _cli(
        "evaluate",
        "captioner",
        "--split",
        "test",
        "--json",
        "--data",
        str(data),
        "--checkpoint",
        str(base / "shipped"),
        "--limit",
        "210",
        "--beam",
        "2",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report["parts"]) == {"all", "seen", "novel_pairs", "novel_sizes"}
    every = report["parts"]["all"]
    assert every["images"] == 210
    assert {"exact_match", "bleu4", "cider"} <= set(every)
    assert 0 <= every["exact_match"] <= 1
    assert 0 <= every["objects_named"] <= 1 and every["objects"] >= 210
    assert {"seen exact_match", "novel_pairs exact_match"} <= set(report["goals"])
    for part in report["parts"]:  # the attention goals hold on every part
        assert {f"{part} attention_in_box", f"{part} attention_over_baseline"} <= set(
            report["goals"]
        )
    assert report["decoding"]["beam_size"] == 2


def test_localisation_counts_mass_inside_the_named_box(small_captioner_data):
    from models.caption_data import read_glyphs, read_scenes
    from models.caption_eval import cell_coverage, localisation, part_report

    data, _ = small_captioner_data
    glyphs = read_glyphs(data)
    scenes, _ = read_scenes(data, "test")
    scene = next(s for s in scenes if s.kind == "pair")
    words = scene.caption.split()
    coverage = [cell_coverage([o.box], 6) for o in scene.objects]
    on_object = np.stack([c / c.sum() for c in coverage])  # attention inside each box
    attention = np.full((len(words), 36), 1 / 36)
    for index, objects in scene.name_words.items():
        attention[index] = on_object[objects[0]]
    pairs = localisation(words, attention, scene, glyphs, 6)
    assert len(pairs) == len(scene.name_words)
    for (inside, _, on_cells, _, _), index in zip(pairs, sorted(scene.name_words), strict=True):
        c = coverage[scene.name_words[index][0]]
        assert inside == pytest.approx((c * c).sum() / c.sum())  # partly covered cells count
        assert on_cells == pytest.approx(1.0)  # every weight on a cell the box touches
    assert sum(p[4] for p in pairs) == len(scene.objects)  # one first word per object
    uniform = localisation(words, np.full((len(words), 36), 1 / 36), scene, glyphs, 6)
    assert all(
        inside == pytest.approx(share) and on_cells == pytest.approx(cells)
        for inside, share, on_cells, cells, _ in uniform
    )
    report = part_report(
        [scene.caption, "a bus"], [attention, attention[:2]], [scene, scene], glyphs, 6
    )
    assert report["exact_match"] == 0.5 and report["attention_over_baseline"] > 1
    distinct = len({o.glyph for o in scene.objects})
    assert report["objects"] == 2 * distinct  # every object of the scene, in both captions
    bus = "bus" in {glyphs[o.glyph].name for o in scene.objects}
    assert report["objects_named"] == pytest.approx((distinct + bus) / (2 * distinct))


def test_a_relation_counts_when_said_of_both_objects_in_the_scenes_order(small_captioner_data):
    from models.caption_data import read_glyphs, read_scenes
    from models.caption_eval import part_report, relation_right
    from models.scenes import RELATIONS

    data, _ = small_captioner_data
    glyphs = read_glyphs(data)
    scenes, _ = read_scenes(data, "test")
    scene = next(s for s in scenes if s.kind == "pair")
    first, second = (glyphs[o.glyph].name for o in scene.objects)
    said = next(r for r in RELATIONS if r in scene.caption)
    other = next(r for r in RELATIONS if r != said)
    stranger = next(g.name for g in glyphs if g.name not in (first, second))
    assert relation_right(scene.caption, scene, glyphs) is True
    assert relation_right(f"a {first} {said} a {second}", scene, glyphs) is True
    assert relation_right(f"a {second} {said} a {first}", scene, glyphs) is False
    assert relation_right(f"a {first} {other} a {second}", scene, glyphs) is False
    assert relation_right(f"a {first} {said} a {stranger}", scene, glyphs) is None
    single = next(s for s in scenes if s.kind != "pair")
    assert relation_right(single.caption, single, glyphs) is None
    captions = [scene.caption, f"a {second} {said} a {first}", f"a {first} {said} a {stranger}"]
    report = part_report(captions, [np.zeros((0, 36))] * 3, [scene] * 3, glyphs, 6)
    assert report["relations"] == 2 and report["relation_right"] == 0.5


def test_a_longer_name_holding_an_object_s_name_does_not_name_that_object(
    small_captioner_data,
):
    from models.caption_data import read_glyphs
    from models.caption_eval import localisation, named_objects, objects_named, relation_right
    from models.scenes import Scene, SceneObject

    data, _ = small_captioner_data
    glyphs = read_glyphs(data)
    # "dog" and "guide dog", "bus" and "bus stop": an object's name inside another's
    held = [
        (short, long)
        for short, g in enumerate(glyphs)
        for long, h in enumerate(glyphs)
        if short != long and f" {g.name} " in f" {h.name} "
    ]
    assert held
    for short, long in held:
        name, other = glyphs[short].name, glyphs[long].name
        third = next(i for i in range(len(glyphs)) if i not in (short, long))
        objects = [
            SceneObject(short, name, (0, 0, 40, 40)),
            SceneObject(third, glyphs[third].name, (50, 50, 90, 90)),
        ]
        scene = Scene("pair", f"a {name} above a {glyphs[third].name}", objects)
        wrong = f"a {other} above a {glyphs[third].name}"
        assert objects_named(scene.caption, scene, glyphs) == (2, 2)
        assert objects_named(wrong, scene, glyphs) == (1, 2), (name, other)
        assert all(v == [1] for v in named_objects(wrong.split(), scene, glyphs).values())
        assert relation_right(wrong, scene, glyphs) is None  # one object is not named
        words = wrong.split()
        rows = localisation(words, np.full((len(words), 144), 1 / 144), scene, glyphs, 12)
        assert len(rows) == len(glyphs[third].name.split())  # the third object's words only


@pytest.mark.slow
def test_caption_command_draws_the_attention_figure(tiny_run, tmp_path):
    from PIL import Image

    from models.caption_data import read_scenes

    data, base, _ = tiny_run
    _, images = read_scenes(data, "test")
    path = tmp_path / "scene.png"
    Image.fromarray(np.asarray(images[0])).save(path)
    figure = tmp_path / "attention.png"
    done = _cli(
        "caption",
        "--engine",
        "torch",
        str(path),
        "--checkpoint",
        str(base / "shipped"),
        "--attention",
        str(figure),
        "--json",
        "--beam",
        "3",
        "--n-best",
        "2",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads(done.stdout)["captions"]
    best = result["hypotheses"][0]
    grid = [best["attention"]["grid_height"], best["attention"]["grid_width"]]
    assert len(result["hypotheses"]) == 2 and grid == [6, 6]
    assert len(best["attention"]["tokens"]) >= len(best["tokens"])
    with Image.open(figure) as drawn:
        assert drawn.size[0] > 400 and drawn.size[1] >= 200
    missing = _cli(
        "caption",
        "--engine",
        "torch",
        str(tmp_path / "none.png"),
        "--checkpoint",
        str(base / "shipped"),
    )
    assert missing.returncode == 2 and "none.png" in missing.stderr


def test_the_attention_figure_has_a_panel_per_word():
    from service.attention_figure import draw_attention, upsample

    image = np.zeros((96, 96, 3), dtype=np.uint8)
    attention = np.eye(36)[[0, 35, 7]]
    figure = draw_attention(image, ["▁a", "▁bus", "</s>"], attention, (6, 6))
    titles = [ax.get_title() for ax in figure.axes[:4]]
    assert titles == ["image", "a", "bus", "</s>"]
    heat = upsample(attention[1], 6, 6, (96, 96))
    assert heat[90, 90] > 0.9 and heat[5, 5] < 0.05  # the last cell is the bottom right
    with pytest.raises(ValueError, match="3 tokens but 2 attention rows"):
        draw_attention(image, ["▁a", "▁bus", "</s>"], attention[:2], (6, 6))


def test_the_learning_rate_decays_over_its_steps_whatever_the_time(small_captioner_data, tmp_path):
    data, _ = small_captioner_data
    options = _tiny_options(data, tmp_path, decay_steps=100, warmup_steps=10, learning_rate=1e-3)
    trainer = CaptionTrainer(options)
    rates = {}
    for step, seconds in ((50, 0.0), (50, 1e6), (100, 0.0), (400, 0.0)):
        trainer.progress.step, trainer.progress.seconds = step, seconds
        rates[step, seconds] = trainer.learning_rate()
    assert rates[50, 0.0] == rates[50, 1e6] == pytest.approx(1e-3 * 0.51)
    assert rates[100, 0.0] == rates[400, 0.0] == pytest.approx(1e-3 * 0.02)
    trainer.options.decay_steps = 0  # over the time budget: half of it spent, half the decay
    trainer.progress.seconds = options.max_minutes * 30
    assert trainer.learning_rate() == pytest.approx(1e-3 * 0.51)
