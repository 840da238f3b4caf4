"""Training the translator: label smoothing, Adam with warm-up, clipping, resumable checkpoints.

Runs as one process or under `torchrun` with DistributedDataParallel (gloo on CPU, nccl on
GPUs): each rank takes every world_size-th batch, gradients are averaged by DDP, and rank 0
alone logs, evaluates and writes checkpoints.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from models.checkpoint import save_checkpoint
from models.config import PRESETS, TransformerConfig
from models.corpus import read_split
from models.evaluate import corpus_scores
from models.modern import SYNTHETIC_TAG
from models.reference import TorchEngine
from models.run_state import load_state, out_of_budget, restore_rng, save_state
from models.shipped import SHIPPED_TRANSLATOR
from models.tokenizer import train_tokenizer
from models.transfer import transfer_weights
from models.transformer import Transformer
from service.runtime.batching import pad_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from service.runtime.translation import translate_texts


@dataclass
class TrainOptions:
    data_dir: Path = Path("data/translator")
    run_dir: Path = Path("runs/translator")  # resumable state: last.pt, best.pt, log.jsonl
    out_dir: Path = SHIPPED_TRANSLATOR  # the shipped fp16 checkpoint
    model: TransformerConfig = field(default_factory=lambda: PRESETS["base"])
    vocab_size: int = 8000
    max_tokens: int = 4000  # source + target tokens (with padding) per batch and rank
    warmup_steps: int = 500
    lr_scale: float = 0.7  # times the paper's d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    max_minutes: float = 80.0  # training time budget, summed over resumes
    max_epochs: int = 1000
    max_steps: int = 0  # 0: no limit
    checkpoint_every: int = 100  # steps
    dev_sentences: int = 0  # 0: the whole dev split
    seed: int = 1
    threads: int = 0  # torch threads per process; 0 leaves torch's choice
    init_from: Path | None = None  # a new run starts from this checkpoint (models.transfer)
    # Weights are also kept every `snapshot_every` steps (the last `average` of them); the mean
    # of those is shipped when its dev BLEU beats the best single checkpoint's. 0: off.
    average: int = 0
    snapshot_every: int = 400


@dataclass
class Progress:
    """Everything needed to resume exactly where training stopped."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    seconds: float = 0.0
    best_bleu: float = -1.0
    last_loss: float = 0.0
    history: list[dict] = field(default_factory=list)


def learning_rate(step: int, d_model: int, warmup: int, scale: float) -> float:
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def make_batches(
    pairs: list[tuple[list[int], list[int]]], max_tokens: int, seed: int
) -> list[list[int]]:
    """Indices of pairs grouped by similar length, padded size at most max_tokens, shuffled."""
    rng = random.Random(seed)
    order = sorted(
        range(len(pairs)), key=lambda i: (len(pairs[i][0]) + rng.random(), len(pairs[i][1]))
    )
    batches, current, longest = [], [], 0
    for i in order:
        size = len(pairs[i][0]) + len(pairs[i][1]) + 2
        if current and (len(current) + 1) * max(longest, size) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def collate(pairs: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    """Source with `</s>`; decoder input `<s> y`, decoder output `y </s>`."""
    src, src_mask = pad_batch([s + [EOS_ID] for s, _ in pairs])
    tgt_in, tgt_mask = pad_batch([[BOS_ID] + t for _, t in pairs])
    tgt_out, _ = pad_batch([t + [EOS_ID] for _, t in pairs])
    arrays = dict(src=src, src_mask=src_mask, tgt_in=tgt_in, tgt_mask=tgt_mask, tgt_out=tgt_out)
    return {name: torch.from_numpy(a) for name, a in arrays.items()}


def load_pairs(options: TrainOptions, tokenizer: Tokenizer) -> list[tuple[list[int], list[int]]]:
    spanish, english = read_split(options.data_dir, "train")
    limit = options.model.max_length - 1
    src, tgt = tokenizer.encode_batch(spanish), tokenizer.encode_batch(english)
    return [(s[:limit], t[:limit]) for s, t in zip(src, tgt, strict=True)]


def dev_bleu(model: Transformer, tokenizer: Tokenizer, options: TrainOptions) -> dict:
    spanish, english = read_split(options.data_dir, "dev")
    if options.dev_sentences:
        spanish, english = spanish[: options.dev_sentences], english[: options.dev_sentences]
    decoding = DecodingOptions(beam_size=1, max_length=160)
    engine = TorchEngine(model, str(next(model.parameters()).device))
    nbest = translate_texts(engine, tokenizer, spanish, decoding, model.config.max_length, 64)
    model.train()
    hypotheses = [tokenizer.decode(n[0].tokens) for n in nbest]
    return corpus_scores(hypotheses, english)


class Trainer:
    def __init__(self, options: TrainOptions):
        self.options = options
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.run_dir = Path(options.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.tokenizer = self._tokenizer()
        self.device = torch.device("cpu")
        if torch.cuda.is_available():
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(self.device)
        torch.manual_seed(options.seed)
        self.model = Transformer(options.model).to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9
        )
        self.progress = Progress()
        self.saved_rng: dict | None = None  # the generators' states this run goes on from
        if not self._resume() and options.init_from is not None:
            counts = transfer_weights(self.model, self.tokenizer, Path(options.init_from))
            if self.rank == 0:
                print(json.dumps({"init_from": str(options.init_from), **counts}), flush=True)
        self.network = self.model
        if self.world > 1:
            self.network = DistributedDataParallel(self.model, device_ids=self._device_ids())

    def _device_ids(self) -> list[int] | None:
        return [self.device.index] if self.device.type == "cuda" else None

    def _tokenizer(self) -> Tokenizer:
        model_file = self.run_dir / "tokenizer.model"
        if not model_file.exists() and self.rank == 0:
            spanish, english = read_split(self.options.data_dir, "train")
            tagged = any(line.startswith(SYNTHETIC_TAG) for line in spanish)
            symbols = (SYNTHETIC_TAG,) if tagged else ()  # the modern mix's synthetic sources
            train_tokenizer(spanish + english, model_file, self.options.vocab_size, symbols=symbols)
        if self.world > 1:
            dist.barrier()
        tokenizer = Tokenizer(model_file)
        expected = self.options.model.vocab_size
        if tokenizer.vocab_size != expected:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, model {expected}")
        return tokenizer

    def _resume(self) -> bool:
        """Loads the run's last state; False when there is none yet."""
        state = load_state(self.run_dir, self.options.model.to_dict())
        if state is None:
            return False
        state["model"] = {k: v.to(self.device) for k, v in state["model"].items()}
        self.model.load_state_dict(state["model"], strict=True)
        if "optimizer" in state:  # not in a packed run (models.run_state.pack_run)
            self.optimizer.load_state_dict(state["optimizer"])
        self.progress = Progress(**state["progress"])
        self.saved_rng = state.get("rng")
        return True

    def _save(self, name: str) -> None:
        if self.rank == 0:
            save_state(
                self.run_dir,
                name,
                {"model": self.model},
                self.optimizer,
                self.progress,
                self.options.model.to_dict(),
            )

    def _snapshot(self) -> None:
        """Keeps the weights of this step in `snapshots/`, the last `average` of them."""
        if self.rank != 0:
            return
        directory = self.run_dir / SNAPSHOTS
        directory.mkdir(exist_ok=True)
        tmp = directory / "step.tmp"
        snapshot = {"model": self.model.state_dict(), "step": self.progress.step}
        torch.save(snapshot | {"model_config": self.options.model.to_dict()}, tmp)
        tmp.replace(directory / f"step-{self.progress.step:07d}.pt")
        for old in snapshot_files(self.run_dir)[: -self.options.average]:
            old.unlink()

    def _out_of_budget(self) -> bool:
        return out_of_budget(self.options, self.progress)

    def train_step(self, batch: dict[str, torch.Tensor]) -> tuple[float, int]:
        o, p = self.options, self.progress
        lr = learning_rate(p.step + 1, o.model.d_model, o.warmup_steps, o.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        logits = self.network(batch["src"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])
        tokens = int(batch["tgt_mask"].sum())
        loss = (
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                batch["tgt_out"].reshape(-1),
                ignore_index=PAD_ID,
                label_smoothing=o.label_smoothing,
                reduction="sum",
            )
            / tokens
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.clip_norm)
        self.optimizer.step()
        p.step += 1
        return float(loss.detach()), tokens + int(batch["src_mask"].sum())

    def run_epoch(self, pairs) -> None:
        o, p = self.options, self.progress
        batches = make_batches(pairs, o.max_tokens, o.seed + p.epoch)[self.rank :: self.world]
        bar = tqdm(
            total=len(batches),
            initial=p.batch_in_epoch,
            disable=self.rank != 0,
            desc=f"epoch {p.epoch + 1}",
            dynamic_ncols=True,
            mininterval=5,
        )
        self.model.train()
        while p.batch_in_epoch < len(batches) and not self._out_of_budget():
            start = time.perf_counter()
            batch = collate([pairs[i] for i in batches[p.batch_in_epoch]])
            loss, tokens = self.train_step({k: v.to(self.device) for k, v in batch.items()})
            elapsed = time.perf_counter() - start
            p.seconds += elapsed
            p.batch_in_epoch += 1
            p.last_loss = loss
            bar.update(1)
            bar.set_postfix(
                loss=f"{loss:.3f}", tok_s=f"{tokens * self.world / elapsed:.0f}", step=p.step
            )
            if p.step % o.checkpoint_every == 0:
                self._save("last")
            if o.average and p.step % o.snapshot_every == 0:
                self._snapshot()
        bar.close()
        if p.batch_in_epoch >= len(batches):
            p.epoch, p.batch_in_epoch = p.epoch + 1, 0
            self.evaluate()

    def evaluate(self) -> None:
        """Dev BLEU now; keeps best.pt, the checkpoint that will be shipped."""
        p = self.progress
        if self.rank == 0:
            scores = dev_bleu(self.model, self.tokenizer, self.options)
            entry = {
                "epoch": p.epoch,
                "batch_in_epoch": p.batch_in_epoch,
                "step": p.step,
                "minutes": round(p.seconds / 60, 1),
                "train_loss": round(p.last_loss, 4),
                "dev_bleu": scores["bleu"],
                "dev_chrf": scores["chrf"],
            }
            p.history.append(entry)
            print(json.dumps(entry), flush=True)
            if scores["bleu"] > p.best_bleu:
                p.best_bleu = scores["bleu"]
                self._save("best")
            self._save("last")
        if self.world > 1:
            dist.barrier()

    def train(self) -> None:
        restore_rng(self.saved_rng, self.options.seed + self.progress.step)
        pairs = load_pairs(self.options, self.tokenizer)
        while not self._out_of_budget():
            self.run_epoch(pairs)
        if self.progress.batch_in_epoch > 0:  # the same on every rank
            self.evaluate()  # the budget ended inside an epoch: that model competes too
        self._save("last")

    def ship(self) -> Path:
        """Writes the best checkpoint (by dev BLEU) in shipped form: the best single one, or
        the mean of the last snapshots when that scores higher."""
        best = self.run_dir / ("best.pt" if (self.run_dir / "best.pt").exists() else "last.pt")
        state = torch.load(best, map_location="cpu", weights_only=False)
        model = Transformer(self.options.model)
        state["model"] = {k: v.cpu() for k, v in state["model"].items()}
        model.load_state_dict(state["model"], strict=True)
        shipped = {"weights": best.name, "dev_bleu": state["progress"]["best_bleu"]}
        snapshots = snapshot_files(self.run_dir)[-self.options.average :]
        if self.options.average and len(snapshots) > 1:
            mean = Transformer(self.options.model)
            mean.load_state_dict(average_weights(snapshots), strict=True)
            scores = dev_bleu(mean, self.tokenizer, self.options)
            averaged = {"weights": [p.name for p in snapshots], "dev_bleu": scores["bleu"]}
            print(json.dumps({"mean of snapshots": averaged, "best": shipped}), flush=True)
            if scores["bleu"] > shipped["dev_bleu"]:
                model, shipped = mean, averaged
        save_checkpoint(model, self.run_dir / "tokenizer.model", Path(self.options.out_dir))
        # The whole run's time and dev history: best.pt may be older than the run's end.
        summary = {
            "trained_minutes": round(self.progress.seconds / 60, 1),
            "steps": self.progress.step,
            "shipped": shipped,
            "history": self.progress.history,
            "options": _jsonable(asdict(self.options)),
        }
        (Path(self.options.out_dir) / "training.json").write_text(
            json.dumps(summary, indent=2) + "\n"
        )
        return Path(self.options.out_dir)


SNAPSHOTS = "snapshots"


def snapshot_files(run_dir: Path) -> list[Path]:
    """The run's weight snapshots, oldest first."""
    return sorted((Path(run_dir) / SNAPSHOTS).glob("step-*.pt"))


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the weights saved in `paths` (each holding a "model" state
    dict of the same model), accumulated in float64."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        weights = torch.load(path, map_location="cpu", weights_only=False)["model"]
        for name, value in weights.items():
            total[name] = total.get(name, 0) + value.double()
    return {name: (value / len(paths)).float() for name, value in total.items()}


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return str(value) if isinstance(value, Path) else value


def train(options: TrainOptions) -> Path | None:
    """Trains (resuming if a run exists), then ships the best checkpoint from rank 0."""
    if options.threads:
        torch.set_num_threads(options.threads)
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        trainer = Trainer(options)
        trainer.train()
        return trainer.ship() if trainer.rank == 0 else None
    finally:
        if world > 1:
            dist.destroy_process_group()
