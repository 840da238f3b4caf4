"""What both trainers keep between runs: `last.pt` and `best.pt` in the run directory, each
written whole or not at all, and the budget that ends a run."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch


def load_state(run_dir: Path, model_config: dict) -> dict | None:
    """The state of `last.pt`, or None for a new run; refuses a run of another config."""
    last = Path(run_dir) / "last.pt"
    if not last.exists():
        return None
    state = torch.load(last, map_location="cpu", weights_only=False)
    if state["model_config"] != model_config:
        raise ValueError(f"{last} was trained with another model config; use a new run_dir")
    return state


def save_state(run_dir: Path, name: str, modules: dict, optimizer, progress, model_config: dict):
    """Writes `<name>.pt`: every module's state dict under its key, the optimizer, progress
    (a dataclass) and the model config."""
    state = {key: module.state_dict() for key, module in modules.items()}
    state.update(
        optimizer=optimizer.state_dict(), progress=asdict(progress), model_config=model_config
    )
    tmp = Path(run_dir) / f"{name}.tmp"
    torch.save(state, tmp)
    tmp.replace(Path(run_dir) / f"{name}.pt")


def out_of_budget(options, progress) -> bool:
    """True once the time budget (minutes of training steps), the epochs or the steps are
    spent; `max_steps` 0 is no limit."""
    over_time = progress.seconds >= options.max_minutes * 60
    over_steps = options.max_steps > 0 and progress.step >= options.max_steps
    return over_time or progress.epoch >= options.max_epochs or over_steps
