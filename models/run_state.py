"""What both trainers keep between runs: `last.pt` and `best.pt` in the run directory, each
written whole or not at all, and the budget that ends a run.

A state holds the random generators too (torch's, CUDA's where there is one, and any a trainer
keeps of its own), so that a run resumed in one process draws the dropout masks and
augmentations an unbroken run would have drawn."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch


def load_state(run_dir: Path, model_config: dict | None) -> dict | None:
    """The state of `last.pt`, or None for a new run; refuses a run of another config (None:
    any config)."""
    last = Path(run_dir) / "last.pt"
    if not last.exists():
        return None
    state = torch.load(last, map_location="cpu", weights_only=False)
    if model_config is not None and state["model_config"] != model_config:
        raise ValueError(f"{last} was trained with another model config; use a new run_dir")
    return state


def save_state(
    run_dir: Path,
    name: str,
    modules: dict,
    optimizer,
    progress,
    model_config: dict,
    generators: dict[str, torch.Generator] | None = None,
):
    """Writes `<name>.pt`: every module's state dict under its key, the optimizer, progress
    (a dataclass), the model config and the random generators' states (`rng_states`)."""
    state = {key: module.state_dict() for key, module in modules.items()}
    state.update(
        optimizer=optimizer.state_dict(),
        progress=asdict(progress),
        model_config=model_config,
        rng=rng_states(generators or {}),
    )
    tmp = Path(run_dir) / f"{name}.tmp"
    torch.save(state, tmp)
    tmp.replace(Path(run_dir) / f"{name}.pt")


def rng_states(generators: dict[str, torch.Generator]) -> dict:
    """The states of torch's global generator, CUDA's (where there is one) and `generators`."""
    states = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states | {name: g.get_state() for name, g in generators.items()}


def restore_rng(
    saved: dict | None, seed: int, generators: dict[str, torch.Generator] | None = None
) -> None:
    """Sets the global generators and `generators` to the states `rng_states` saved; without
    them (a new run, a packed one) seeds every one with `seed`."""
    generators = generators or {}
    if saved is None:
        torch.manual_seed(seed)
        for generator in generators.values():
            generator.manual_seed(seed)
        return
    torch.set_rng_state(saved["torch"])
    if "cuda" in saved and torch.cuda.is_available():
        torch.cuda.set_rng_state(saved["cuda"])
    elif torch.cuda.is_available():  # saved where there was no GPU
        torch.cuda.manual_seed(seed)
    for name, generator in generators.items():
        generator.set_state(saved[name])


def out_of_budget(options, progress) -> bool:
    """True once the time budget (minutes of training steps), the epochs or the steps are
    spent; `max_steps` 0 is no limit."""
    over_time = progress.seconds >= options.max_minutes * 60
    over_steps = options.max_steps > 0 and progress.step >= options.max_steps
    return over_time or progress.epoch >= options.max_epochs or over_steps


PACKED_FORMAT = "attnserve-packed-run/1"
_NOT_MODULES = ("optimizer", "progress", "model_config", "rng")


def _packed(weights: dict) -> dict:
    """Tied weights (one storage under several names) are kept once, the others name it."""
    packed, first_of = {}, {}
    for name, tensor in weights.items():
        storage = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape)
        if storage in first_of:
            packed[name] = {"same_as": first_of[storage]}
            continue
        first_of[storage] = name
        tensor = tensor.float()
        if tensor.dim() == 2:
            scale = (tensor.abs().amax(dim=1, keepdim=True) / 127).clamp_min(1e-12)
            rows = torch.round(tensor / scale).to(torch.int8)
            packed[name] = {"int8": rows, "scale": scale.half()}
        else:
            packed[name] = {"half": tensor.half()}
    return packed


def _unpacked(packed: dict) -> dict:
    weights = {}
    for name, parts in packed.items():
        if "same_as" in parts:
            weights[name] = weights[parts["same_as"]]
        elif "int8" in parts:
            weights[name] = parts["int8"].float() * parts["scale"].float()
        else:
            weights[name] = parts["half"].float()
    return weights


def pack_run(run_dir: Path, out: Path) -> dict:
    """Writes `out`: the run's last state small enough to keep in the repository, so that a
    run longer than one sitting goes on from another machine (`unpack_run`). Matrices are
    int8 with one fp16 scale per row (the rounding is far below what the next hundred steps
    change), everything else fp16; the progress, the model config and the run's tokenizer are
    kept; the optimizer's moments are not (Adam rebuilds them in a few steps). Returns a
    summary."""
    state = load_state(run_dir, None)
    if state is None:
        raise FileNotFoundError(f"{run_dir}/last.pt: no run to pack")
    modules = {key: value for key, value in state.items() if key not in _NOT_MODULES}
    packed = {
        "format": PACKED_FORMAT,
        "modules": {key: _packed(weights) for key, weights in modules.items()},
        "progress": state["progress"],
        "model_config": state["model_config"],
        "tokenizer": (Path(run_dir) / "tokenizer.model").read_bytes(),
    }
    tmp = Path(out).with_suffix(".tmp")
    torch.save(packed, tmp)
    tmp.replace(out)
    return {"step": state["progress"]["step"], "bytes": Path(out).stat().st_size}


def unpack_run(packed_file: Path, run_dir: Path) -> dict:
    """Makes `run_dir` (which must hold no run yet) go on from a packed run: `last.pt` without
    optimizer state and the tokenizer. The best dev score starts again (no best.pt travels)."""
    run_dir = Path(run_dir)
    if (run_dir / "last.pt").exists():
        raise FileExistsError(f"{run_dir} already holds a run")
    packed = torch.load(packed_file, map_location="cpu", weights_only=False)
    if packed.get("format") != PACKED_FORMAT:
        raise ValueError(f"{packed_file} is not a packed run")
    modules = {key: _unpacked(weights) for key, weights in packed["modules"].items()}
    progress = {k: -1.0 if k.startswith("best_") else v for k, v in packed["progress"].items()}
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "tokenizer.model").write_bytes(packed["tokenizer"])
    state = {**modules, "progress": progress, "model_config": packed["model_config"]}
    tmp = run_dir / "last.tmp"
    torch.save(state, tmp)
    tmp.replace(run_dir / "last.pt")
    return {"step": progress["step"]}


def load_run_weights(path: Path):
    """The translator (eval mode, fp32) and tokenizer of a training run's weights file:
    `last.pt` or `best.pt` of a run directory, or one of its `snapshots/step-*.pt`; the
    config comes from the file (snapshots written before they carried it: from `last.pt`)."""
    from models.checkpoint import reading
    from models.config import TransformerConfig
    from models.tokenizer import Tokenizer
    from models.transformer import Transformer

    path = Path(path)
    run_dir = path.parent.parent if path.parent.name == "snapshots" else path.parent
    with reading(path):  # a file of something else: UnreadableCheckpoint naming it
        state = torch.load(path, map_location="cpu", weights_only=False)
        config = state.get("model_config") or load_state(run_dir, None)["model_config"]
        model = Transformer(TransformerConfig.from_dict(config))
        model.load_state_dict({k: v.float() for k, v in state["model"].items()}, strict=True)
    return model.eval(), Tokenizer(run_dir / "tokenizer.model")
