r"""Training ensemble members of a local model on graded question–answer pairs.

:func:`train_members` fine-tunes ``M`` members (:mod:`confide.backends.hf.members`) of one
frozen base model:

``lora``
    ``M`` LoRA adapters (rank 8 on ``q_proj``/``v_proj`` by default), each with its own
    initialisation seed and its own data order.
``sve``
    Per-member singular values of the target weights, initialised at the base's and
    trained jointly (one optimiser, one loop), each member on its own data order.
``mc-dropout``
    Nothing is trained: ``ensemble.json`` records the dropout rate, the layers and the
    number of passes ``K``.

**Layers.** ``layers="top-K"`` inserts the members into the top ``K`` decoder layers
only (default: the top quarter, :func:`~confide.backends.hf.members.resolve_layers`;
``"all"``: every layer). The lower layers are then the frozen base's: no gradient flows
through them (nothing below the members needs one), so a step costs the forward pass
and a backward pass through the top ``K`` layers alone, and scoring runs the lower layers
once for all members. ``ensemble.json`` records the choice (``settings.layers``).

**Loss.** Each item is prompted exactly as a run prompts it (the task's prompt format,
:meth:`confide.tasks.base.Task.render`); the target is its first reference in the
format's answer template followed by the stop text (``" Paris\n"`` after
``Question: …\nAnswer:``; in a chat prompt the answer and the end-of-turn token). Member
:math:`m`'s loss at a step is the mean next-token cross-entropy over the answer tokens
of its batch :math:`\mathcal{B}_m`, the prompt masked:

.. math:: L_m = -\frac{1}{\sum_{i \in \mathcal{B}_m} |a_i|} \sum_{i \in \mathcal{B}_m}
          \sum_{t=1}^{|a_i|} \log p_{\theta_m}(a_{i,t} \mid x_i, a_{i,<t})

minimised by Adam at a constant learning rate, each member's gradient clipped to norm
``max_grad_norm`` on its own (members never share a step size, so member ``m`` trains
as it would alone).

**Data order.** Member :math:`m` reads the items in the order of one permutation per
epoch, ``numpy.random.default_rng([data_seed, m, epoch])``; step :math:`s` takes positions
:math:`sB .. sB + B - 1` of that stream. The order is a function of (data seed, member,
step), so a resumed training reads the same batches.

**Resuming.** Every ``checkpoint_every`` steps and at the end, the members, the optimiser
state and the loss curve are written, each file whole or not at all (temporary file,
then ``os.replace``), ``checkpoint.pt`` first and ``ensemble.json`` last. The same call
on the same ``out`` continues from the last checkpoint and ends with the weights an
uninterrupted training reaches; other settings are refused with the list of differences;
more ``steps`` than were done continue the training.

References: Hu et al. 2022, "LoRA: Low-Rank Adaptation of Large Language Models",
https://arxiv.org/abs/2106.09685. Wang et al. 2023, "LoRA ensembles for large language
model fine-tuning", https://arxiv.org/abs/2310.00035. Gal and Ghahramani 2016, "Dropout
as a Bayesian approximation", https://arxiv.org/abs/1506.02142.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.paths import atomic_output, writable_dir

if TYPE_CHECKING:
    from confide.backends.hf.members import EnsembleInfo, MemberLayers
    from confide.core.records import Item
    from confide.tasks.base import Task

__all__ = ["DEFAULT_LR", "Example", "TrainingProgress", "batch_indices", "load_examples",
           "train_members"]

#: Learning rate of each method when none is given (Adam, constant).
DEFAULT_LR = {"lora": 2e-4, "sve": 1e-3, "mc-dropout": 0.0}

#: ``progress(steps_done, steps, mean loss of the last step over members)``
TrainingProgress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Example:
    """One training pair as token ids: the prompt (masked) and the answer (learned)."""

    item_id: str
    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]


def _answer_text(task: Task, item: Item, *, chat: bool, end: str) -> str:
    from confide.tasks.prompts import render_template

    answer = str(item.metadata.get("exemplar_answer", item.references[0]))
    target = task.templates.get("target") or " {{ answer }}"
    text = render_template(target, {"answer": answer, "question": item.question,
                                    "choices": list(item.metadata.get("choices", [])),
                                    "metadata": item.metadata, "id": item.id})
    return text.strip() + end if chat else text + end


def load_examples(model: Any, data: str | Path | None = None, *, task: str | None = None,
                  offset: int = 0, limit: int | None = None,
                  task_options: dict[str, Any] | None = None
                  ) -> tuple[list[Example], dict[str, Any]]:
    """The training pairs of a task's items ``offset .. offset + limit - 1``, tokenised.

    ``task`` alone: a built-in task's bundled items; ``task`` and ``data``: the built-in
    task read from the full data file ``data``; ``data`` alone: the user's data file
    (question and reference fields as for ``confide run``: ``task_options``).

    Returns the examples and the description of the data stored in ``ensemble.json``
    (task, file, sha256, offset, count, hash of the item ids, prompt format).

    Raises
    ------
    InvalidInputError : no data named, an offset past the items, an item without a
        reference answer (naming its id).
    """
    from confide.tasks import load_task

    if task is None and data is None:
        raise InvalidInputError("name the training data: a task (--task) or a question–answer "
                                "file (--data)", field="data")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"must be a non-negative integer, got {offset!r}",
                                field="offset")
    options = dict(task_options or {})
    if task is not None:
        loaded = load_task(task, data_path=None if data is None else str(data), **options)
    else:
        loaded = load_task(str(data), **options)
    where = loaded.data_file or str(data or task)
    if offset >= len(loaded.items):
        raise InvalidInputError(
            f"offset {offset} leaves no item: the data has {len(loaded.items)} items"
            + ("; give the full data file with --data" if task is not None and data is None
               else ""), file=where, field="offset")
    items = loaded.items[offset:]
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"must be a positive integer, got {limit!r}", field="limit")
        items = items[:limit]
    chat = bool(model.has_chat_template)
    eos = model.tokenizer.eos_token or ""
    examples = []
    for item in items:
        if not item.references:
            raise InvalidInputError(f"item {item.id!r} has no reference answer to train on",
                                    file=where, field="references")
        prompt = loaded.render(item, chat=chat)
        as_chat = isinstance(prompt, list)
        end = eos if as_chat else (loaded.stop[0] if loaded.stop else eos)
        answer = _answer_text(loaded, item, chat=as_chat, end=end)
        answer_ids = model.tokenizer(answer, add_special_tokens=False)["input_ids"]
        examples.append(Example(item.id, tuple(model.encode(prompt)), tuple(answer_ids)))
    ids = "\n".join(e.item_id for e in examples)
    description = {"task": loaded.name, "file": loaded.data_file, "sha256": loaded.data_sha256,
                   "offset": offset, "limit": limit, "items": len(examples),
                   "item_ids_sha256": hashlib.sha256(ids.encode()).hexdigest(),
                   "format": loaded.format, "chat": chat, "options": options}
    return examples, description


def batch_indices(n: int, batch_size: int, *, data_seed: int, member: int, step: int
                  ) -> list[int]:
    """Indices of member ``member``'s batch at step ``step`` (0-based) over ``n`` items.

    >>> batch_indices(4, 3, data_seed=0, member=0, step=0) == batch_indices(
    ...     4, 3, data_seed=0, member=0, step=0)
    True
    >>> sorted(batch_indices(4, 2, data_seed=0, member=1, step=0)
    ...        + batch_indices(4, 2, data_seed=0, member=1, step=1))
    [0, 1, 2, 3]
    """
    out = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, at = divmod(position, n)
        out.append(int(np.random.default_rng([data_seed, member, epoch]).permutation(n)[at]))
    return out


def _member_seeds(seed: int, count: int) -> list[int]:
    return [int(np.random.SeedSequence([seed, m]).generate_state(1)[0]) for m in range(count)]


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)]


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Stored settings as today's: an ensemble trained before ``layers`` adapts all."""
    return {"layers": "all", **settings}


def _check_value(value: Any, name: str, *, low: float, kind: type = int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) \
            or not value >= low:
        raise InvalidInputError(f"must be {'a number' if kind is float else 'an integer'} "
                                f"of at least {low:g}, got {value!r}", field=name)


def train_members(model: Any, data: str | Path | None = None, *, task: str | None = None,
                  method: str = "lora", members: int = 4, steps: int = 100, rank: int = 8,
                  alpha: float | None = None, lr: float | None = None, seed: int = 0,
                  data_seed: int | None = None, out: str | Path, batch_size: int = 8,
                  offset: int = 0, limit: int | None = None,
                  targets: tuple[str, ...] | None = None, layers: str | int | None = None,
                  dropout: float = 0.1,
                  checkpoint_every: int = 10, max_grad_norm: float = 1.0,
                  task_options: dict[str, Any] | None = None,
                  progress: TrainingProgress | None = None) -> EnsembleInfo:
    """Train (or, for ``mc-dropout``, describe) ``members`` ensemble members into ``out``.

    Parameters
    ----------
    model : :class:`~confide.backends.hf.HFBackend`
        The frozen base; trained in its dtype (members' own weights in float32).
    data, task, offset, limit, task_options : the training items (:func:`load_examples`):
        items ``offset .. offset + limit - 1`` of a task or file. Use items a run never
        evaluates (TriviaQA: the full file beyond its first 1,000 lines).
    method : ``lora``, ``sve`` or ``mc-dropout``.
    members : M (mc-dropout: passes K), at least 1.
    steps : optimiser steps; each member sees ``batch_size`` items a step (mc-dropout:
        ignored, 0).
    rank, alpha : LoRA rank r and scale alpha (default ``2 r``).
    lr : Adam's learning rate (default :data:`DEFAULT_LR` of the method).
    seed : the members' seeds derive from it (LoRA initialisation; mc-dropout masks).
    data_seed : the data orders' seed (default: ``seed``).
    out : the ensemble directory.
    targets : module names the members change (default
        :data:`~confide.backends.hf.members.DEFAULT_TARGETS`).
    layers : the decoder layers holding them: ``"all"``, ``"top-K"`` (or ``K``); default
        (``None``) the top quarter, or, resuming ``out``, what it was trained with.
    dropout : mc-dropout's rate p.
    checkpoint_every : steps between checkpoints.
    max_grad_norm : each member's gradient is clipped to this norm (0: not clipped).
    progress : called after each step with (steps done, steps, mean loss).

    Returns
    -------
    EnsembleInfo : what ``out/ensemble.json`` now holds.

    Raises
    ------
    InvalidInputError : a bad option or bad data (naming file and field).
    ConfigMismatch : ``out`` holds an ensemble trained with other settings or on another
        base model (the differences are listed).
    """
    import torch

    from confide.backends.hf import members as mb

    if method not in mb.METHODS:
        raise InvalidInputError(f"{method!r}: use one of {', '.join(mb.METHODS)}",
                                field="method")
    _check_value(members, "members", low=1)
    _check_value(steps, "steps", low=0)
    _check_value(rank, "rank", low=1)
    _check_value(batch_size, "batch_size", low=1)
    _check_value(checkpoint_every, "checkpoint_every", low=1)
    _check_value(max_grad_norm, "max_grad_norm", low=0, kind=float)
    _check_value(seed, "seed", low=0)
    lr = DEFAULT_LR[method] if lr is None else lr
    if method != "mc-dropout":
        _check_value(lr, "lr", low=0, kind=float)
        if lr <= 0:
            raise InvalidInputError(f"must be positive, got {lr!r}", field="lr")
    folder = writable_dir(out, "--out")
    folder.mkdir(parents=True, exist_ok=True)
    examples, data_info = load_examples(model, data, task=task, offset=offset, limit=limit,
                                        task_options=task_options)
    fingerprint = mb.base_fingerprint(model.model)
    chosen = tuple(targets or mb.DEFAULT_TARGETS[method])
    before = mb.read_ensemble(folder) if (folder / mb.ENSEMBLE_FILE).exists() else None
    if layers is None and before is not None:  # resuming: the same layers as before
        layers = _settings(before.settings)["layers"]
    every = isinstance(layers, str) and layers.strip().lower() == "all"  # any decoder
    spec = "all" if every else mb.resolve_layers(layers, len(mb.decoder_layers(model.model)))[0]
    settings: dict[str, Any] = {
        "method": method, "members": members, "targets": list(chosen), "layers": spec,
        "seed": seed, "base_fingerprint": fingerprint, "data_sha256": data_info["sha256"],
        "data_items": data_info["item_ids_sha256"]}
    if method == "mc-dropout":
        settings["dropout"] = dropout
    else:
        settings.update({"lr": lr, "batch_size": batch_size, "max_grad_norm": max_grad_norm,
                         "data_seed": seed if data_seed is None else data_seed})
        if method == "lora":
            settings.update({"rank": rank, "alpha": float(2 * rank if alpha is None
                                                          else alpha)})
    base = {"name": model.source.name, "path": model.source.path,
            "fingerprint": fingerprint, "dtype": str(model.dtype).removeprefix("torch.")}
    info = mb.EnsembleInfo(path=folder, method=method, count=members, settings=settings,
                           base=base, data=data_info, member_seeds=_member_seeds(seed, members),
                           steps=0 if method == "mc-dropout" else steps, steps_done=0)
    checkpoint = folder / mb.CHECKPOINT_FILE
    if before is not None:
        old = before
        differ = _differences(_settings(old.settings), settings)
        if differ:
            raise ConfigMismatch(f"{folder} holds an ensemble trained with other settings:\n  "
                                 + "\n  ".join(differ)
                                 + "\nrepeat them to resume, or train into another --out")
        info = replace(old, steps=max(old.steps_done, info.steps), base=base, data=data_info,
                       settings=settings)
    elif checkpoint.exists():
        raise ConfigMismatch(f"{checkpoint} has no ensemble.json beside it: remove it or "
                             "train into another --out")
    if method == "mc-dropout":
        mb.write_ensemble(info)
        return info
    attached = mb.build_layers(info, model.model)
    try:
        return _train(model, attached, info, examples, settings, checkpoint, checkpoint_every,
                      progress, torch)
    finally:
        attached.detach()


def _train(model: Any, layers: MemberLayers, info: EnsembleInfo, examples: list[Example],
           settings: dict[str, Any], checkpoint: Path, checkpoint_every: int,
           progress: TrainingProgress | None, torch: Any) -> EnsembleInfo:
    from confide.backends.hf import members as mb

    count, batch = info.count, int(settings["batch_size"])
    for p in model.model.parameters():
        p.requires_grad_(False)
    params: list[Any] = []
    for m in range(count):  # SVE's members share one tensor per layer: list it once
        params += [p for p in layers.parameters(m) if all(p is not q for q in params)]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=float(settings["lr"]))
    done, curve, seconds = 0, [list(row) for row in info.loss_curve], info.seconds
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location=model.device, weights_only=True)
        written = _settings(state.get("settings") or {})
        if written != settings:
            raise ConfigMismatch(f"{checkpoint}: written with other settings:\n  "
                                 + "\n  ".join(_differences(written, settings)))
        for m in range(count):
            layers.load_state(m, state["members"][m])
        optimizer.load_state_dict(state["optimizer"])
        done, curve, seconds = int(state["step"]), state["loss_curve"], float(state["seconds"])
    elif info.steps_done:
        raise ConfigMismatch(f"{info.path}: ensemble.json says {info.steps_done} steps are done "
                             f"but {checkpoint.name} is missing: train into another --out")
    else:
        mb.write_ensemble(info)  # the settings are on disk before the first step
    pad = model.tokenizer.pad_token_id
    pad = pad if pad is not None else model.tokenizer.eos_token_id
    decoder = model.model.get_decoder()
    info = replace(info, steps_done=done, loss_curve=curve, seconds=seconds)
    if progress is not None:
        progress(done, info.steps, float(np.mean(curve[-1])) if curve else float("nan"))
    step = done
    while step < info.steps:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        losses = []
        for m in range(count):
            rows = [examples[i] for i in batch_indices(len(examples), batch,
                                                       data_seed=settings["data_seed"],
                                                       member=m, step=step)]
            ids, mask, where, targets = _batch(rows, pad, model.device, torch)
            with torch.enable_grad(), layers.rows([m]):
                hidden = decoder(input_ids=ids, attention_mask=mask,
                                 position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                                 use_cache=False).last_hidden_state
                logits = model.float32_logits(hidden[where[0], where[1]])
                loss = torch.nn.functional.cross_entropy(logits, targets)
                loss.backward()
            losses.append(float(loss.detach()))
            _clip(layers, m, float(settings["max_grad_norm"]), torch)
        optimizer.step()
        step += 1
        curve.append([round(v, 6) for v in losses])
        seconds += time.perf_counter() - started
        if step % checkpoint_every == 0 or step == info.steps:
            info = _save(layers, info, optimizer, settings, checkpoint, step, curve, seconds,
                         torch)
        if progress is not None:
            progress(step, info.steps, float(np.mean(losses)))
    if info.steps_done != step or not info.files:  # resumed past the last save, or 0 steps
        info = _save(layers, info, optimizer, settings, checkpoint, step, curve, seconds, torch)
    return info


def _batch(rows: list[Example], pad: int, device: Any, torch: Any
           ) -> tuple[Any, Any, tuple[Any, Any], Any]:
    """Right-padded ids and mask, the (row, position) pairs predicting answer tokens, and
    those answer tokens."""
    width = max(len(r.prompt_ids) + len(r.answer_ids) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    row_at, pos_at, targets = [], [], []
    for b, r in enumerate(rows):
        seq = r.prompt_ids + r.answer_ids
        ids[b, :len(seq)] = torch.tensor(seq)
        mask[b, :len(seq)] = 1
        for k, token in enumerate(r.answer_ids):  # position p's logits predict token p + 1
            row_at.append(b)
            pos_at.append(len(r.prompt_ids) + k - 1)
            targets.append(token)
    where = (torch.tensor(row_at, device=device), torch.tensor(pos_at, device=device))
    return ids.to(device), mask.to(device), where, torch.tensor(targets, device=device)


def _clip(layers: MemberLayers, m: int, max_norm: float, torch: Any) -> None:
    """Clip member ``m``'s gradient alone (SVE: row ``m`` of each layer's values)."""
    if layers.method == "sve":
        grads = [p.grad[m] for p in layers.parameters(m) if p.grad is not None]
    else:
        grads = [p.grad for p in layers.parameters(m) if p.grad is not None]
    if not grads or max_norm <= 0:
        return
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))


def _save(layers: MemberLayers, info: EnsembleInfo, optimizer: Any, settings: dict[str, Any],
          checkpoint: Path, step: int, curve: list[list[float]], seconds: float, torch: Any
          ) -> EnsembleInfo:
    """Checkpoint, member files, then ensemble.json: each whole or not at all."""
    from confide.backends.hf import members as mb

    state = {"settings": settings, "step": step, "loss_curve": curve, "seconds": seconds,
             "optimizer": optimizer.state_dict(),
             "members": [{k: v.detach().clone() for k, v in layers.state(m).items()}
                         for m in range(info.count)]}
    with atomic_output(checkpoint, "--out", binary=True) as fh:
        torch.save(state, fh)
    files = dict(mb.save_member(layers, m, info.path) for m in range(info.count))
    updated = replace(info, steps_done=step, loss_curve=[list(r) for r in curve], files=files,
                      seconds=seconds)
    mb.write_ensemble(updated)
    return updated

