"""Training the captioner: cross-entropy plus the doubly stochastic attention penalty, Adam
with warm-up and a cosine decay over the time budget, resumable checkpoints.

An auxiliary loss, used in training only, teaches the CNN what is in the image: a linear
classifier over each grid location's features, max-pooled over the locations, predicts which
glyphs the scene holds (binary cross-entropy per glyph). Without it the decoder learned the
caption's structure and every position word within an epoch but no object at all (dev exact
match 0.4%, every object named the same): the names' signal reaches the CNN only through an
attention that starts uniform over the grid's locations. The classifier is not part of the shipped
model; inference is the paper's model alone.

The dev score is the exact-match rate under teacher forcing: every token's argmax equals the
reference exactly when greedy decoding returns the reference, so it is the greedy exact match
at the cost of one teacher-forced pass.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from models.caption_augment import add_mixstyle, rand_conv
from models.caption_data import read_glyphs, read_scenes
from models.captioner import Captioner, attention_penalty
from models.checkpoint import save_checkpoint, save_grammar
from models.config import CAPTIONER_PRESETS, CaptionerConfig
from models.run_state import load_state, out_of_budget, restore_rng, save_state
from models.scenes import REGIONS, caption_grammar
from models.shipped import SHIPPED_CAPTIONER
from models.tokenizer import train_tokenizer
from service.runtime.batching import pad_batch
from service.runtime.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

TEMPLATE_WORDS = "a an two to the left of above and from right top bottom middle in on at"


@dataclass
class CaptionTrainOptions:
    data_dir: Path = Path("data/captioner")
    run_dir: Path = Path("runs/captioner")  # resumable state: last.pt, best.pt
    out_dir: Path = SHIPPED_CAPTIONER  # the shipped fp16 checkpoint
    model: CaptionerConfig = field(default_factory=lambda: CAPTIONER_PRESETS["base"])
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup_steps: int = 200
    clip_norm: float = 5.0
    label_smoothing: float = 0.0
    presence_weight: float = 0.2  # the auxiliary glyph-presence loss (training only)
    rand_conv: float = 0.0  # share of a batch's images restyled by a random convolution
    mixstyle: float = 0.0  # probability a batch's feature styles are mixed (MixStyle)
    mixstyle_stages: int = 2  # after the encoder's first this many stages
    max_minutes: float = 240.0  # training time budget, summed over resumes (legs)
    leg_minutes: float = 0.0  # this invocation's share of it (0: the rest of the budget)
    max_epochs: int = 1000
    max_steps: int = 0  # 0: no limit
    decay_steps: int = 0  # the learning rate's cosine spans these steps (0: the time budget)
    checkpoint_every: int = 100  # steps
    evaluate_every: int = 500  # steps between dev scores inside an epoch (0: at its end only)
    seed: int = 1
    threads: int = 0


@dataclass
class CaptionProgress:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    seconds: float = 0.0
    best_exact: float = -1.0
    last_loss: float = 0.0
    history: list[dict] = field(default_factory=list)


def caption_vocabulary(data_dir: Path) -> list[str]:
    """Every word a caption can hold: glyph names, their plurals and the template words."""
    words = set(TEMPLATE_WORDS.split())
    words.update(w for row in REGIONS for phrase in row for w in phrase.split())
    for glyph in read_glyphs(data_dir):
        words.update(glyph.name.split() + glyph.plural.split())
    return sorted(words)


def build_tokenizer(data_dir: Path, model_file: Path) -> Tokenizer:
    words = caption_vocabulary(data_dir)
    return train_tokenizer(words, model_file, len(words) + 4, "word")


def batch_tensors(images: np.ndarray, captions: list[list[int]]) -> dict[str, torch.Tensor]:
    """uint8 images (B, H, W, 3) and caption ids -> pixels (B, 3, H, W) in [0, 1], decoder
    input `<s> y`, output `y </s>` and its mask (B, T)."""
    pixels = torch.from_numpy(np.array(images, dtype=np.uint8)).permute(0, 3, 1, 2).float() / 255.0
    tgt_in, tgt_mask = pad_batch([[BOS_ID, *c] for c in captions])
    tgt_out, _ = pad_batch([[*c, EOS_ID] for c in captions])
    return {
        "pixels": pixels.contiguous(memory_format=torch.channels_last),
        "tgt_in": torch.from_numpy(tgt_in),
        "tgt_out": torch.from_numpy(tgt_out),
        "tgt_mask": torch.from_numpy(tgt_mask).float(),
    }


class PresenceHead(torch.nn.Module):
    """Which glyphs an image holds, from its grid: a linear classifier per location, the
    largest score over the locations per glyph (training only)."""

    def __init__(self, features: int, glyphs: int):
        super().__init__()
        self.classify = torch.nn.Linear(features, glyphs)
        torch.nn.init.constant_(self.classify.bias, -5.0)  # most glyphs are absent

    def loss(self, grid: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """grid (B, L, D), present (B, G) 0/1 -> binary cross-entropy summed over glyphs,
        averaged over the batch."""
        scores = self.classify(grid).amax(dim=1)  # (B, G)
        return F.binary_cross_entropy_with_logits(scores, present, reduction="sum") / len(grid)


def caption_loss(model: Captioner, batch: dict, smoothing: float = 0.0, presence=None):
    """(total loss, cross-entropy per token, logits (B, T, V)); with a PresenceHead and
    batch["present"], its loss is added with its weight (presence = (head, weight))."""
    encoded = model.encode(batch["pixels"])
    logits, attention = model.teacher_forced(encoded, batch["tgt_in"])
    tokens = batch["tgt_mask"].sum()
    cross_entropy = (
        F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            batch["tgt_out"].reshape(-1),
            ignore_index=PAD_ID,
            label_smoothing=smoothing,
            reduction="sum",
        )
        / tokens
    )
    penalty = attention_penalty(attention, batch["tgt_mask"])
    loss = cross_entropy + model.config.attention_regularisation * penalty
    if presence is not None:
        head, weight = presence
        loss = loss + weight * head.loss(encoded[0], batch["present"])
    return loss, cross_entropy, logits


@torch.no_grad()
def teacher_forced_exact(model: Captioner, images, captions, batch_size: int = 128) -> float:
    """Share of captions whose every token (and `</s>`) is the argmax under teacher forcing."""
    return teacher_forced_scores(model, images, captions, [[] for _ in captions], batch_size)[0]


@torch.no_grad()
def teacher_forced_scores(
    model: Captioner, images, captions, names: list[list[int]], batch_size: int = 128
) -> tuple[float, float]:
    """(share of captions whose every token (and `</s>`) is the argmax under teacher forcing,
    share of the tokens at positions `names` (per caption) that are): the second says how
    many objects are recognised, long before whole captions come out right."""
    model.eval()
    exact = named = positions = 0
    for start in range(0, len(captions), batch_size):
        batch = batch_tensors(
            images[start : start + batch_size], captions[start : start + batch_size]
        )
        logits, _ = model(batch["pixels"], batch["tgt_in"])
        hit = logits.argmax(-1) == batch["tgt_out"]
        exact += int((hit | (batch["tgt_mask"] == 0)).all(dim=1).sum())
        for row, where in enumerate(names[start : start + batch_size]):
            named += int(hit[row, where].sum())
            positions += len(where)
    model.train()
    return exact / max(len(captions), 1), named / max(positions, 1)


@torch.no_grad()
def presence_recall(model: Captioner, head: PresenceHead, images, glyph_sets, batch_size=128):
    """Share of the objects of each image among its n best-scored glyphs by the presence
    head (n: its distinct objects): how well the encoder alone recognises what is there."""
    model.eval()
    hits = total = 0
    for start in range(0, len(glyph_sets), batch_size):
        chunk = np.asarray(images[start : start + batch_size], dtype=np.uint8)
        pixels = torch.from_numpy(chunk).permute(0, 3, 1, 2).float() / 255.0
        scores = head.classify(model.encoder(pixels)).amax(dim=1)  # (B, G)
        for row, glyphs in enumerate(glyph_sets[start : start + batch_size]):
            best = set(scores[row].topk(len(glyphs)).indices.tolist())
            hits, total = hits + len(best & glyphs), total + len(glyphs)
    model.train()
    return hits / max(total, 1)


class CaptionTrainer:
    def __init__(self, options: CaptionTrainOptions):
        self.options = options
        self.run_dir = Path(options.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        model_file = self.run_dir / "tokenizer.model"
        if not model_file.exists():
            build_tokenizer(options.data_dir, model_file)
        self.tokenizer = Tokenizer(model_file)
        # the vocabulary is the captions' closed word list: the config follows it
        options.model = replace(options.model, vocab_size=self.tokenizer.vocab_size)
        torch.manual_seed(options.seed)
        self.model = Captioner(options.model).to(memory_format=torch.channels_last)
        self.glyphs = len(read_glyphs(options.data_dir))
        self.presence = PresenceHead(options.model.feature_dim, self.glyphs)
        parameters = [*self.model.parameters(), *self.presence.parameters()]
        self.optimizer = torch.optim.Adam(parameters, lr=options.learning_rate)
        # the augmentations' own generators: random convolutions, MixStyle
        self.generators = {name: torch.Generator() for name in ("rand_conv", "mixstyle")}
        if options.mixstyle > 0:  # hooks in training only: the model's weights are the same
            add_mixstyle(
                self.model.encoder.layers,
                options.mixstyle_stages,
                options.mixstyle,
                self.generators["mixstyle"],
            )
        self.progress = CaptionProgress()
        self.saved_rng: dict | None = None  # the generators' states this run goes on from
        self._resume()
        self.leg_start = self.progress.seconds

    def _resume(self) -> None:
        state = load_state(self.run_dir, self.options.model.to_dict())
        if state is not None:
            self.model.load_state_dict(state["model"], strict=True)
            self.presence.load_state_dict(state["presence"], strict=True)
            if "optimizer" in state:  # not in a packed run (models.run_state.pack_run)
                self.optimizer.load_state_dict(state["optimizer"])
            self.progress = CaptionProgress(**state["progress"])
            self.saved_rng = state.get("rng")

    def _save(self, name: str) -> None:
        modules = {"model": self.model, "presence": self.presence}
        save_state(
            self.run_dir,
            name,
            modules,
            self.optimizer,
            self.progress,
            self.options.model.to_dict(),
            self.generators,
        )

    def _out_of_budget(self) -> bool:
        return out_of_budget(self.options, self.progress) or self._leg_over()

    def _leg_over(self) -> bool:
        leg = self.options.leg_minutes
        return leg > 0 and self.progress.seconds - self.leg_start >= leg * 60

    @property
    def finished(self) -> bool:
        """Whether the whole budget is spent (not only this leg)."""
        return out_of_budget(self.options, self.progress)

    def learning_rate(self) -> float:
        """Linear warm-up, then a cosine from the peak to 2% of it over `decay_steps` where
        set (a run whose schedule does not depend on how fast the machine is, or on what else
        runs beside it), else over the time budget."""
        o, p = self.options, self.progress
        warm = min(1.0, (p.step + 1) / o.warmup_steps)
        if o.decay_steps:
            done = min(1.0, p.step / o.decay_steps)
        else:
            done = min(1.0, p.seconds / (o.max_minutes * 60))
        return o.learning_rate * warm * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * done)))

    def train_step(self, batch: dict) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        presence = (self.presence, self.options.presence_weight)
        loss, cross_entropy, _ = caption_loss(
            self.model, batch, self.options.label_smoothing, presence
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options.clip_norm)
        self.optimizer.step()
        self.progress.step += 1
        return float(cross_entropy.detach())

    def run_epoch(self, images, captions, present) -> None:
        o, p = self.options, self.progress
        order = np.random.default_rng(o.seed + p.epoch).permutation(len(captions))
        batches = [order[i : i + o.batch_size] for i in range(0, len(order), o.batch_size)]
        bar = tqdm(
            total=len(batches),
            initial=p.batch_in_epoch,
            desc=f"epoch {p.epoch + 1}",
            dynamic_ncols=True,
            mininterval=5,
        )
        self.model.train()
        while p.batch_in_epoch < len(batches) and not self._out_of_budget():
            start = time.perf_counter()
            index = np.sort(batches[p.batch_in_epoch])
            batch = batch_tensors(images[index], [captions[i] for i in index])
            batch["pixels"] = rand_conv(batch["pixels"], o.rand_conv, self.generators["rand_conv"])
            batch["present"] = torch.from_numpy(present[index])
            p.last_loss = self.train_step(batch)
            p.seconds += time.perf_counter() - start
            p.batch_in_epoch += 1
            bar.update(1)
            bar.set_postfix(loss=f"{p.last_loss:.3f}", step=p.step, min=f"{p.seconds / 60:.1f}")
            if p.step % o.checkpoint_every == 0:
                self._save("last")
            if o.evaluate_every and p.step % o.evaluate_every == 0:
                self.evaluate()
        bar.close()
        if p.batch_in_epoch >= len(batches):
            p.epoch, p.batch_in_epoch = p.epoch + 1, 0
            self.evaluate()

    def evaluate(self) -> None:
        """Dev exact match per part; the `seen` part (the whole dev split where it has no
        parts) chooses the best checkpoint, the held-out family's part is only watched."""
        p = self.progress
        scenes, images = read_scenes(self.options.data_dir, "dev")
        captions = self.tokenizer.encode_batch([s.caption for s in scenes])
        parts, names, present = {}, {}, {}
        for part in dict.fromkeys(s.part or "seen" for s in scenes):
            chosen = [i for i, s in enumerate(scenes) if (s.part or "seen") == part]
            exact, named = teacher_forced_scores(
                self.model,
                images[chosen],
                [captions[i] for i in chosen],
                [sorted(scenes[i].name_words) for i in chosen],  # a word is a piece
            )
            parts[part], names[part] = round(exact, 4), round(named, 4)
            glyph_sets = [{o.glyph for o in scenes[i].objects} for i in chosen]
            present[part] = round(
                presence_recall(self.model, self.presence, images[chosen], glyph_sets), 4
            )
        exact = parts["seen"]
        entry = {
            "epoch": p.epoch,
            "batch_in_epoch": p.batch_in_epoch,
            "step": p.step,
            "minutes": round(p.seconds / 60, 1),
            "train_cross_entropy": round(p.last_loss, 4),
            "dev_exact": exact,
            "dev_parts": parts,
            "dev_names": names,
            "dev_presence": present,
        }
        p.history.append(entry)
        print(json.dumps(entry), flush=True)
        if exact > p.best_exact:
            p.best_exact = exact
            self._save("best")
        self._save("last")

    def train(self) -> None:
        restore_rng(self.saved_rng, self.options.seed + self.progress.step, self.generators)
        scenes, images = read_scenes(self.options.data_dir, "train")
        images = np.asarray(images)  # in memory: batches gather random rows
        captions = self.tokenizer.encode_batch([s.caption for s in scenes])
        present = np.zeros((len(scenes), self.glyphs), dtype=np.float32)  # (N, G) 0/1
        for i, scene in enumerate(scenes):
            present[i, [o.glyph for o in scene.objects]] = 1.0
        while not self._out_of_budget():
            self.run_epoch(images, captions, present)
        if self.progress.batch_in_epoch > 0:
            self.evaluate()  # the budget ended inside an epoch: that model competes too
        self._save("last")

    def ship(self) -> Path:
        """Writes the best checkpoint (by dev exact match) in shipped form."""
        best = self.run_dir / ("best.pt" if (self.run_dir / "best.pt").exists() else "last.pt")
        state = torch.load(best, map_location="cpu", weights_only=False)
        model = Captioner(self.options.model)
        model.load_state_dict(state["model"], strict=True)
        out = Path(self.options.out_dir)
        save_checkpoint(model, self.run_dir / "tokenizer.model", out)
        save_grammar(caption_grammar(read_glyphs(self.options.data_dir)), out)
        shipped = state["progress"]
        summary = {
            "trained_minutes": round(self.progress.seconds / 60, 1),
            "history": self.progress.history,  # the whole run
            "shipped": {"step": shipped["step"], "dev_exact": shipped["best_exact"]},
            "options": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.options).items()
            },
        }
        (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
        return out


def train_captioner(options: CaptionTrainOptions) -> Path | None:
    """Trains (resuming if a run exists) for a leg or the rest of the budget; once the whole
    budget is spent, ships the best checkpoint and returns where. A leg that ends first
    returns None: the next invocation goes on from its state."""
    if options.threads:
        torch.set_num_threads(options.threads)
    trainer = CaptionTrainer(options)
    trainer.train()
    return trainer.ship() if trainer.finished else None
