r"""Ensemble members on one frozen base model: their files, and every member's logits in one
batched pass.

An ensemble directory ``DIR`` holds

``ensemble.json``
    What the members are and where they come from (:data:`FORMAT`, version
    :data:`VERSION`): the method (``lora``, ``sve``, ``mc-dropout``), the base model's name
    and :func:`base_fingerprint`, the training data file and its sha256, the seeds (one per
    member, one for the data order), the steps done, every step's loss per member, the
    learning rate, rank, target layers and the decoder layers adapted (``layers``:
    ``all`` or ``top-K``), and the sha256 of each member file.
``member-<m>.safetensors``
    Member ``m``'s own weights only: its LoRA matrices :math:`A_m, B_m` (``lora``) or its
    singular values :math:`s_m` (``sve``), its ``layers`` in the file's metadata.
    ``mc-dropout`` has none: its masks are drawn from the seed.
``checkpoint.pt``
    The optimiser's state for resuming (:mod:`confide.learned.training`).

The three methods, each member :math:`m = 1..M` a change of the target layers' weights
:math:`W` (``q_proj``, ``v_proj`` by default) in the decoder layers it adapts (``layers``:
every layer, or only the top :math:`K`, :func:`resolve_layers`):

``lora`` (Hu et al. 2022; ensembles: Wang et al. 2023)
    :math:`W_m = W + \tfrac{\alpha}{r} B_m A_m` with rank-:math:`r` matrices
    (``peft``'s LoRA layers, one adapter per member).
``sve`` (singular value ensembles)
    :math:`W = U \operatorname{diag}(s) V^\top` is decomposed once and
    :math:`W_m = U \operatorname{diag}(s_m) V^\top`; only :math:`s_m` is trained. Applied as
    :math:`W x + U \operatorname{diag}(s_m - s) V^\top x`, so a member at its
    initialisation :math:`s_m = s` gives the base model's output exactly.
``mc-dropout`` (Gal and Ghahramani 2016)
    Inputs of the target layers (``down_proj`` by default: the MLP's hidden units) are
    multiplied by a mask :math:`z_m / (1 - p)`, :math:`z_m \sim \text{Bernoulli}(1 - p)`,
    drawn once per layer and pass from (seed, layer) and shared by every row and
    position: pass :math:`m` is one fixed thinned network, so a sequence's tokens are
    all scored under the same network and a pass does not depend on its batch.

:class:`EnsembleMembers` attaches the members of a directory to a loaded
:class:`~confide.backends.hf.HFBackend` after checking that the base is the one they
were trained on. Attached members leave the backend's own passes unchanged: the members
act only inside :meth:`EnsembleMembers.decoder_pass` (and training).

**Shared lower layers.** Members that adapt only the top :math:`K` of :math:`N` decoder
layers compute the same hidden states below layer :math:`N - K`. A pass of :math:`B` rows
under all :math:`M` members (:meth:`EnsembleMembers.decoder_pass`) runs those lower layers
once over the :math:`B` rows, then repeats the hidden states (and the attention mask and
position embeddings) :math:`M` times along the batch axis at layer :math:`N - K`, so the top
layers run over :math:`M B` rows, block :math:`m` under member :math:`m`. The pass costs
:math:`(N - K) + M K` layer-passes of :math:`B` rows instead of :math:`M N`: with
:math:`M = 4` and the default :math:`K = \lceil N/4 \rceil`, 1.75 passes of the base
model instead of 4. Training such members needs no backward pass through the lower layers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.paths import atomic_output

__all__ = ["CHECKPOINT_FILE", "DEFAULT_TARGETS", "ENSEMBLE_FILE", "FORMAT", "FORWARD_TOKENS",
           "METHODS", "VERSION", "DropoutMembers", "EnsembleInfo", "EnsembleMembers",
           "LoraMembers", "MemberLayers", "SVEMembers", "base_fingerprint", "build_layers",
           "check_base", "decoder_layers", "member_file", "read_ensemble", "resolve_layers",
           "save_member", "write_ensemble"]

FORMAT = "confide-ensemble"
VERSION = 1
ENSEMBLE_FILE = "ensemble.json"
CHECKPOINT_FILE = "checkpoint.pt"
METHODS = ("lora", "sve", "mc-dropout")
#: The layers each method changes when none are named (module names end with these).
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "lora": ("q_proj", "v_proj"), "sve": ("q_proj", "v_proj"), "mc-dropout": ("down_proj",)}
#: Most member rows x tokens one pass of :meth:`EnsembleMembers.forward_all` (and one chunk
#: of teacher forcing) holds: larger batches run in chunks of rows.
FORWARD_TOKENS = 32768
_ATTACHED = "_confide_members"  # set on a model while members are attached to it
_SAMPLE = 4096  # values of each weight read by the fingerprint
# what a decoder hands each layer per row, repeated for the member rows (hidden states aside)
_PER_ROW = frozenset({"attention_mask", "position_ids", "position_embeddings"})


def member_file(m: int) -> str:
    """File name of member ``m``'s weights."""
    return f"member-{m}.safetensors"


def base_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a base model's architecture and weights, the same in any dtype.

    Hashes the architecture's sizes from the config and, for every weight (by name, in
    order), its shape and up to 4,096 evenly spaced values rounded to bfloat16, so a
    model loaded in float32 or in bfloat16 from the same file gets the same fingerprint,
    and a fine-tuned or other model (where nearly every weight differs) another one. It
    reads under 1 MB of weights whatever the model's size.
    """
    cfg = getattr(model, "config", None)
    keys = ("model_type", "vocab_size", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "max_position_embeddings", "rope_theta", "tie_word_embeddings")
    h = hashlib.sha256(json.dumps({k: getattr(cfg, k, None) for k in keys}, sort_keys=True,
                                  default=str).encode())
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            flat = tensor.detach().reshape(-1)
            step = max(1, flat.numel() // _SAMPLE)
            sample = flat[::step][:_SAMPLE].to("cpu", torch.bfloat16).view(torch.int16)
            h.update(f"{name}:{tuple(tensor.shape)}\0".encode())
            h.update(sample.numpy().tobytes())
    return h.hexdigest()[:32]


def decoder_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(module name, module)`` of the model's transformer layers, bottom to top.

    Raises
    ------
    InvalidInputError : the model's decoder keeps no ``layers`` list (members must then
        adapt every layer: ``layers="all"``).
    """
    get = getattr(model, "get_decoder", None)
    stack = getattr(get() if callable(get) else model, "layers", None)
    if not isinstance(stack, torch.nn.ModuleList) or not len(stack):
        raise InvalidInputError("this model's decoder has no list of layers to choose the top "
                                "ones from: use layers='all' (--layers all)", field="layers")
    names = {id(mod): name for name, mod in model.named_modules()}
    return [(names[id(layer)], layer) for layer in stack]


def resolve_layers(layers: str | int | None, n: int) -> tuple[str, list[int]]:
    r"""The decoder layers members adapt, of ``n``: ``(spec, indices)``.

    ``"all"`` (or ``"top-n"``): every layer; ``"top-K"`` or the integer ``K``: the top
    ``K`` layers ``n - K .. n - 1``; ``None``: the default, the top quarter
    :math:`K = \lceil n / 4 \rceil` (8 of SmolLM2's 30). The default is set by cost: the
    shared lower layers run once, so :math:`M = 4` members cost :math:`(n - K + 4K) / n =`
    1.75 passes of the base instead of 4, which brings greedy + teacher forcing under 4
    members below half the time of greedy + 10 samples (``benchmarks/ensembles.py``);
    ``all`` remains for members that may change every layer.

    >>> resolve_layers(None, 30)[0], resolve_layers("top-2", 30)[1], resolve_layers(4, 4)[0]
    ('top-8', [28, 29], 'all')

    Raises
    ------
    InvalidInputError : ``layers`` is neither ``all`` nor ``top-K`` with ``1 <= K <= n``.
    """
    if layers is None:
        k = max(1, math.ceil(n / 4))
    elif isinstance(layers, int) and not isinstance(layers, bool):
        k = layers
    elif isinstance(layers, str) and layers.strip().lower() == "all":
        k = n
    elif isinstance(layers, str) and (found := re.fullmatch(r"top-(\d+)", layers.strip().lower())):
        k = int(found.group(1))
    else:
        raise InvalidInputError(f"{layers!r}: use all or top-K (the top K decoder layers)",
                                field="layers")
    if not 1 <= k <= n:
        raise InvalidInputError(f"top-{k}: the model has {n} decoder layers, so K must lie in "
                                f"1..{n}", field="layers")
    return ("all" if k == n else f"top-{k}"), list(range(n - k, n))


def _targets_in(model: torch.nn.Module, targets: Sequence[str],
                layers: Sequence[int] | None = None) -> list[tuple[str, Any]]:
    """``(name, module)`` of every Linear layer whose name ends with one of ``targets``,
    within the decoder layers ``layers`` (``None``: anywhere)."""
    found = [(name, mod) for name, mod in model.named_modules()
             if isinstance(mod, torch.nn.Linear)
             and any(name == t or name.endswith("." + t) for t in targets)]
    if not found:
        raise InvalidInputError(f"no linear layer of the model is named {', '.join(targets)}",
                                field="targets")
    if layers is not None:
        stack = decoder_layers(model)
        inside = tuple(stack[i][0] + "." for i in layers)
        found = [(name, mod) for name, mod in found if name.startswith(inside)]
        if not found:
            raise InvalidInputError(f"no linear layer named {', '.join(targets)} in decoder "
                                    f"layers {min(layers)}..{max(layers)}: name layers there, "
                                    "or adapt all layers (--layers all)", field="layers")
    return found


def _set_module(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


# -- member layers -------------------------------------------------------------------------


class MemberLayers:
    """The members' changes inserted into one model: switched on per block of rows.

    Inside ``with layers.rows(ms)`` the model's next passes take a batch of
    ``len(ms)`` equal blocks of rows, block ``i`` computed by member ``ms[i]``; outside,
    the model computes as the base. :meth:`detach` restores the model as it was.
    """

    method: str
    count: int
    #: the decoder layers the members change (``None``: every layer)
    adapted: list[int] | None = None

    @property
    def first_layer(self) -> int:
        """The lowest decoder layer a member changes: the layers below it are shared."""
        return min(self.adapted) if self.adapted else 0

    def __init__(self, model: torch.nn.Module) -> None:
        if getattr(model, _ATTACHED, False):
            raise InvalidInputError("this model already has ensemble members attached; "
                                    "close them first (EnsembleMembers.close)", field="model")
        self.model = model
        self._grad_flags = {n: p.requires_grad for n, p in model.named_parameters()}
        self._active: list[int] | None = None
        setattr(model, _ATTACHED, True)

    @contextlib.contextmanager
    def rows(self, members: Sequence[int]) -> Iterator[None]:
        """Blocks of rows computed by ``members`` (equal blocks, in this order)."""
        if not members or any(not 0 <= m < self.count for m in members):
            raise InvalidInputError(f"member indices must lie in 0..{self.count - 1}",
                                    field="members")
        self._active = list(members)
        try:
            yield
        finally:
            self._active = None

    def _blocks(self, n_rows: int) -> list[int]:
        assert self._active is not None  # called only inside rows()
        if n_rows % len(self._active):
            raise InvalidInputError(f"{n_rows} rows do not split into {len(self._active)} "
                                    "equal member blocks", field="input_ids")
        return self._active

    def parameters(self, m: int) -> list[torch.nn.Parameter]:
        """Member ``m``'s trainable tensors (empty for mc-dropout)."""
        return [p for p in self.state(m).values() if isinstance(p, torch.nn.Parameter)]

    def state(self, m: int) -> dict[str, torch.Tensor]:
        """Member ``m``'s own weights by name (what its file holds)."""
        return {}

    def load_state(self, m: int, tensors: Mapping[str, torch.Tensor]) -> None:
        """Set member ``m``'s weights from its file's tensors (names checked)."""
        own = self.state(m)
        if set(own) != set(tensors):
            missing = sorted(set(own) - set(tensors))[:3]
            extra = sorted(set(tensors) - set(own))[:3]
            raise InvalidInputError(f"member {m}: tensors do not match the model "
                                    f"(missing {missing}, unexpected {extra})",
                                    field=member_file(m))
        with torch.no_grad():
            for name, target in own.items():
                if tuple(tensors[name].shape) != tuple(target.shape):
                    raise InvalidInputError(
                        f"{name}: shape {tuple(tensors[name].shape)}, the model's is "
                        f"{tuple(target.shape)}", field=member_file(m))
                target.copy_(tensors[name].to(target.device, target.dtype))

    def detach(self) -> None:
        """Remove the members: the model is the base again (parameters' grad flags too)."""
        self._remove()
        for name, p in self.model.named_parameters():
            p.requires_grad_(self._grad_flags.get(name, p.requires_grad))
        if hasattr(self.model, _ATTACHED):
            delattr(self.model, _ATTACHED)

    def _remove(self) -> None:
        raise NotImplementedError


class LoraMembers(MemberLayers):
    r"""``count`` LoRA adapters (``peft``) on the target layers:
    :math:`W_m = W + \tfrac{\alpha}{r} B_m A_m`.

    Each member's :math:`A_m` is initialised from ``seeds[m]`` (peft's Kaiming-uniform),
    :math:`B_m = 0`, so every member starts as the base. Rows are routed to their member
    by peft's mixed-adapter batches (``adapter_names``): the base layer runs once over all
    rows and each adapter over its own block; outside :meth:`rows` every row is routed to
    the base (``"__base__"``).
    """

    method = "lora"

    def __init__(self, model: torch.nn.Module, count: int, *, rank: int = 8,
                 alpha: float = 16.0, targets: Sequence[str] = DEFAULT_TARGETS["lora"],
                 seeds: Sequence[int] | None = None, layers: Sequence[int] | None = None
                 ) -> None:
        from peft import LoraConfig, get_peft_model

        found = _targets_in(model, targets, layers)  # a clear error before peft's
        super().__init__(model)
        self.count, self.rank, self.alpha = count, rank, alpha
        self.adapted = None if layers is None else list(layers)
        self.names = [f"member-{m}" for m in range(count)]
        # the top layers only: peft matches these full module names exactly
        modules = list(targets) if layers is None else [name for name, _ in found]
        # peft annotates lora_alpha as int; a float scale works the same
        config = LoraConfig(r=rank, lora_alpha=alpha,  # type: ignore[arg-type]
                            target_modules=modules, lora_dropout=0.0, bias="none")
        seeds = list(seeds) if seeds is not None else list(range(count))
        try:
            for m, name in enumerate(self.names):
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seeds[m])
                    if m == 0:
                        self.peft = get_peft_model(model, config, adapter_name=name)
                    else:
                        self.peft.add_adapter(name, config)
        except Exception:
            if m:
                self.peft.unload()
            self._restore_flags()
            raise
        from peft.tuners.lora import LoraLayer

        self._layers: dict[str, Any] = {n: mod for n, mod in model.named_modules()
                                        if isinstance(mod, LoraLayer)}
        # peft makes only the first adapter trainable; enabling or disabling its adapter
        # layers would change that again, so rows are routed by adapter_names alone.
        for p in (p for m in range(count) for p in self.state(m).values()):
            p.requires_grad_(True)
        self._hooks = [mod.register_forward_pre_hook(self._route, with_kwargs=True)
                       for mod in self._layers.values()]

    def _restore_flags(self) -> None:
        for name, p in self.model.named_parameters():
            p.requires_grad_(self._grad_flags.get(name, p.requires_grad))
        delattr(self.model, _ATTACHED)

    def _route(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        x = args[0] if args else kwargs["x"]
        if self._active is None:  # outside rows(): every row is the base's
            names = ["__base__"] * x.shape[0]
        else:
            blocks = self._blocks(x.shape[0])
            per = x.shape[0] // len(blocks)
            names = [self.names[m] for m in blocks for _ in range(per)]
        return args, {**kwargs, "adapter_names": names}

    def state(self, m: int) -> dict[str, torch.Tensor]:
        name = self.names[m]
        out: dict[str, torch.Tensor] = {}
        for path, layer in self._layers.items():
            out[f"{path}.lora_A"] = layer.lora_A[name].weight
            out[f"{path}.lora_B"] = layer.lora_B[name].weight
        return out

    def _remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self.peft.unload()  # puts each base layer back in place


class _SVELinear(torch.nn.Module):
    """A linear layer whose member rows add :math:`U \\operatorname{diag}(s_m - s) V^T x`."""

    def __init__(self, base: torch.nn.Linear, count: int, owner: SVEMembers) -> None:
        super().__init__()
        self.base = base
        with torch.no_grad():
            u, s, vh = torch.linalg.svd(base.weight.detach().float(), full_matrices=False)
        self.register_buffer("u", u, persistent=False)
        self.register_buffer("vh", vh, persistent=False)
        self.register_buffer("s", s, persistent=False)
        self.values = torch.nn.Parameter(s.repeat(count, 1))  # (members, rank), float32
        self._owner = (owner,)  # a tuple: not registered as a submodule

    @property
    def weight(self) -> torch.Tensor:  # code that reads layer.weight sees the base's
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        owner = self._owner[0]
        if owner._active is None:
            return y
        blocks = owner._blocks(x.shape[0])
        delta = self.values[blocks] - self.s  # (blocks, rank)
        xs = x.reshape(len(blocks), -1, x.shape[-1]).float()
        d = ((xs @ self.vh.T) * delta[:, None, :]) @ self.u.T
        return y + d.reshape(y.shape).to(y.dtype)


class SVEMembers(MemberLayers):
    r"""Singular value ensemble: :math:`W = U \operatorname{diag}(s) V^\top` of each target
    weight (float32 SVD), frozen :math:`U, V`, per-member :math:`s_m` (float32,
    initialised at :math:`s`).

    Member rows cost the base layer plus two thin products per target layer
    (:math:`V^\top x`, then :math:`U(\cdot)`), all members in one batched product.
    """

    method = "sve"

    def __init__(self, model: torch.nn.Module, count: int, *,
                 targets: Sequence[str] = DEFAULT_TARGETS["sve"],
                 layers: Sequence[int] | None = None) -> None:
        found = _targets_in(model, targets, layers)
        super().__init__(model)
        self.count = count
        self.adapted = None if layers is None else list(layers)
        self._layers: dict[str, _SVELinear] = {}
        for name, base in found:
            layer = _SVELinear(base, count, self)
            _set_module(model, name, layer)
            self._layers[name] = layer

    def state(self, m: int) -> dict[str, torch.Tensor]:
        # Views of row m of each layer's values: the trainable tensor is the (M, r) matrix.
        return {f"{name}.s": layer.values[m] for name, layer in self._layers.items()}

    def parameters(self, m: int) -> list[torch.nn.Parameter]:
        """All members' values (one tensor per layer): train every member in one loop."""
        return [layer.values for layer in self._layers.values()]

    def base_values(self) -> dict[str, torch.Tensor]:
        """The base's singular values :math:`s` of each target layer."""
        return {f"{name}.s": layer.s for name, layer in self._layers.items()}

    def _remove(self) -> None:
        for name, layer in self._layers.items():
            _set_module(self.model, name, layer.base)


class DropoutMembers(MemberLayers):
    r"""MC dropout with ``count`` fixed masks: pass :math:`m` multiplies each target layer's
    input by :math:`z_{m} / (1-p)`, :math:`z_{m} \sim \text{Bernoulli}(1-p)^{d}`, drawn
    from ``(seed, layer index)`` with numpy's PCG64 (the same masks on any device)."""

    method = "mc-dropout"

    def __init__(self, model: torch.nn.Module, count: int, *, p: float = 0.1, seed: int = 0,
                 targets: Sequence[str] = DEFAULT_TARGETS["mc-dropout"],
                 layers: Sequence[int] | None = None) -> None:
        if not 0.0 < p < 1.0:
            raise InvalidInputError(f"dropout rate must lie in (0, 1), got {p!r}",
                                    field="dropout")
        found = _targets_in(model, targets, layers)
        super().__init__(model)
        self.count, self.p = count, p
        self.adapted = None if layers is None else list(layers)
        self._masks: dict[str, torch.Tensor] = {}
        self._hooks = []
        for i, (name, layer) in enumerate(found):
            keep = np.random.default_rng([seed, i]).random((count, layer.in_features)) >= p
            self._masks[name] = torch.tensor(keep / (1.0 - p), dtype=torch.float32,
                                             device=layer.weight.device)
            self._hooks.append(layer.register_forward_pre_hook(self._hook(name)))

    def _hook(self, name: str) -> Any:
        def apply(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
            if self._active is None:
                return None
            x = args[0]
            blocks = self._blocks(x.shape[0])
            mask = self._masks[name][blocks].to(x.dtype)  # (blocks, d)
            xs = x.reshape(len(blocks), -1, x.shape[-1]) * mask[:, None, :]
            return (xs.reshape(x.shape), *args[1:])
        return apply

    def _remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


# -- the directory's description --------------------------------------------------------------


@dataclass(frozen=True)
class EnsembleInfo:
    """What ``DIR/ensemble.json`` says: the members and where they come from.

    ``settings`` are what a resumed training must repeat (:mod:`confide.learned.training`
    lists any difference); ``loss_curve[s][m]`` is member ``m``'s mean answer-token
    cross-entropy at step ``s + 1``; ``files`` maps each member file to its sha256.
    """

    path: Path
    method: str
    count: int
    settings: dict[str, Any]
    base: dict[str, Any]
    data: dict[str, Any]
    member_seeds: list[int]
    steps: int
    steps_done: int
    loss_curve: list[list[float]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every asked step is done (mc-dropout: always)."""
        return self.steps_done >= self.steps

    @property
    def sizes(self) -> dict[str, int]:
        """Bytes of each file in the directory that belongs to the ensemble."""
        names = [ENSEMBLE_FILE, *self.files, CHECKPOINT_FILE]
        return {n: (self.path / n).stat().st_size for n in names if (self.path / n).is_file()}

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``ensemble.json``)."""
        return {"format": FORMAT, "version": VERSION, "method": self.method,
                "members": self.count, "settings": self.settings, "base": self.base,
                "data": self.data, "member_seeds": self.member_seeds, "steps": self.steps,
                "steps_done": self.steps_done, "loss_curve": self.loss_curve,
                "files": self.files, "seconds": round(self.seconds, 3)}


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str, "version": int, "method": str, "members": int, "settings": dict,
    "base": dict, "data": dict, "member_seeds": list, "steps": int, "steps_done": int,
    "loss_curve": list, "files": dict}


def read_ensemble(path: str | Path) -> EnsembleInfo:
    """Read and check ``DIR/ensemble.json`` (``path`` is DIR or the file itself).

    Raises
    ------
    InvalidInputError : ``DIR/ensemble.json: field:`` when the file is missing, not
        JSON, of another format or version, or a field is missing or of the wrong kind.
    """
    p = Path(path)
    file = p if p.name == ENSEMBLE_FILE and p.is_file() else p / ENSEMBLE_FILE
    if not file.is_file():
        raise InvalidInputError("no ensemble here: train one with confide train MODEL "
                                f"--out {p}", file=str(file))
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"not readable JSON: {exc}", file=str(file)) from exc
    if not isinstance(raw, dict):
        raise InvalidInputError("expected a JSON object", file=str(file))
    for key, kind in _REQUIRED.items():
        if not isinstance(raw.get(key), kind) or isinstance(raw.get(key), bool):
            raise InvalidInputError(f"missing or not {getattr(kind, '__name__', kind)}",
                                    file=str(file), field=key)
    if raw["format"] != FORMAT or raw["version"] != VERSION:
        raise InvalidInputError(f"format {raw['format']!r} version {raw['version']}: this "
                                f"confide reads {FORMAT!r} version {VERSION}", file=str(file),
                                field="version")
    if raw["method"] not in METHODS:
        raise InvalidInputError(f"{raw['method']!r}: one of {', '.join(METHODS)} expected",
                                file=str(file), field="method")
    if raw["members"] < 1 or len(raw["member_seeds"]) != raw["members"]:
        raise InvalidInputError("members must be at least 1, with one seed each",
                                file=str(file), field="member_seeds")
    return EnsembleInfo(path=file.parent, method=raw["method"], count=raw["members"],
                        settings=raw["settings"], base=raw["base"], data=raw["data"],
                        member_seeds=raw["member_seeds"], steps=raw["steps"],
                        steps_done=raw["steps_done"], loss_curve=raw["loss_curve"],
                        files=raw["files"], seconds=float(raw.get("seconds") or 0.0))


def write_ensemble(info: EnsembleInfo) -> Path:
    """Write ``ensemble.json`` whole or not at all."""
    target = info.path / ENSEMBLE_FILE
    with atomic_output(target, "--out") as fh:
        json.dump(info.as_dict(), fh, indent=1)
        fh.write("\n")
    return target


def save_member(layers: MemberLayers, m: int, folder: Path) -> tuple[str, str]:
    """Write member ``m``'s file atomically; return ``(file name, sha256)``."""
    from safetensors.torch import save

    tensors = {k: v.detach().to("cpu", torch.float32).contiguous()
               for k, v in layers.state(m).items()}
    adapted = "all" if layers.adapted is None else f"top-{len(layers.adapted)}"
    data = save(tensors, metadata={"format": FORMAT, "member": str(m), "layers": adapted})
    with atomic_output(folder / member_file(m), "--out", binary=True) as fh:
        fh.write(data)
    return member_file(m), hashlib.sha256(data).hexdigest()



# -- loading onto a backend -------------------------------------------------------------------


def check_base(info: EnsembleInfo, model: torch.nn.Module) -> None:
    """Refuse a base model other than the one the members were trained on.

    Raises
    ------
    ConfigMismatch : naming the directory, both models and both fingerprints.
    """
    have = base_fingerprint(model)
    want = info.base.get("fingerprint")
    if have != want:
        raise ConfigMismatch(
            f"{info.path}: the members were trained on base model "
            f"{info.base.get('name')!r} (fingerprint {want}); the model given has "
            f"fingerprint {have}: load the same base model (same weights and config) to use "
            "them, or train members for this one")



def _adapted(info: EnsembleInfo, model: torch.nn.Module) -> list[int] | None:
    """The decoder layers ``info``'s members change (``None``: all; older ensembles,
    without ``layers`` in their settings, adapt all)."""
    spec = info.settings.get("layers", "all")
    if spec == "all":
        return None
    n = len(decoder_layers(model))
    try:
        return resolve_layers(spec, n)[1]
    except InvalidInputError:
        raise InvalidInputError(f"{spec!r} does not fit this model's {n} decoder layers",
                                file=str(info.path / ENSEMBLE_FILE),
                                field="settings.layers") from None


def build_layers(info: EnsembleInfo, model: torch.nn.Module) -> MemberLayers:
    """Insert ``info``'s members (initial weights) into ``model``."""
    s = info.settings
    targets = tuple(s.get("targets") or DEFAULT_TARGETS[info.method])
    layers = _adapted(info, model)
    if info.method == "lora":
        return LoraMembers(model, info.count, rank=int(s["rank"]), alpha=float(s["alpha"]),
                           targets=targets, seeds=info.member_seeds, layers=layers)
    if info.method == "sve":
        return SVEMembers(model, info.count, targets=targets, layers=layers)
    return DropoutMembers(model, info.count, p=float(s["dropout"]), seed=int(s["seed"]),
                          targets=targets, layers=layers)


def _file_layers(data: bytes) -> str | None:
    """The ``layers`` a member file's metadata names (``None``: a file written before the
    option, whose member adapts what ``ensemble.json`` says)."""
    try:
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + size])
    except (struct.error, ValueError):
        return None  # not safetensors: the loader says so
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta.get("layers") if isinstance(meta, dict) else None


def _check_same_layers(info: EnsembleInfo, blobs: Sequence[bytes]) -> None:
    """Refuse members that adapt different decoder layers than each other or than
    ``ensemble.json`` says: the layers below the first adapted one run once for all."""
    said = str(info.settings.get("layers", "all"))
    each = {member_file(m): _file_layers(data) or said for m, data in enumerate(blobs)}
    if set(each.values()) <= {said}:
        return
    listed = ", ".join(f"{name}: {value}" for name, value in each.items())
    raise InvalidInputError(
        f"the members adapt different decoder layers ({listed}; ensemble.json: {said}): the "
        "members of one ensemble share the layers below the ones they adapt, which run once "
        "for all of them, so they must adapt the same layers; train them together with one "
        "--layers", file=str(info.path / ENSEMBLE_FILE), field="settings.layers")



class EnsembleMembers:
    """The members of an ensemble directory, attached to a loaded HF backend.

    Parameters
    ----------
    backend : :class:`~confide.backends.hf.HFBackend`
        The base model; its fingerprint must equal the one in ``ensemble.json``.
    layers : the attached :class:`MemberLayers`.
    info : the directory's :class:`EnsembleInfo`.

    Use :meth:`load`. While attached, the backend's own passes stay the base model's; call
    :meth:`close` (or use ``with``) to remove the members from the model.
    """

    def __init__(self, backend: Any, layers: MemberLayers, info: EnsembleInfo) -> None:
        self.backend, self.layers, self.info = backend, layers, info
        self._stack: list[torch.nn.Module] | None = None  # the decoder's layers, looked up once

    @classmethod
    def load(cls, path: str | Path, backend: Any) -> EnsembleMembers:
        """Read ``path/ensemble.json``, check the base model and each member file's sha256,
        and attach the members to ``backend``'s model.

        Raises
        ------
        InvalidInputError : a bad ``ensemble.json``, a missing or changed member file, or
            an ensemble whose training has not reached its first checkpoint.
        ConfigMismatch : ``backend`` is not the base model the members were trained on.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load

        info = read_ensemble(path)
        if info.method != "mc-dropout" and len(info.files) != info.count:
            raise InvalidInputError(
                f"{len(info.files)} member file(s) for {info.count} members: the training "
                "has not reached its first checkpoint; rerun the same confide train command",
                file=str(info.path / ENSEMBLE_FILE), field="files")
        check_base(info, backend.model)
        blobs = []
        for m in range(info.count if info.method != "mc-dropout" else 0):
            f = info.path / member_file(m)
            try:
                data = f.read_bytes()
            except OSError as exc:
                raise InvalidInputError(f"cannot read member file: {exc.strerror}",
                                        file=str(f)) from exc
            if hashlib.sha256(data).hexdigest() != info.files.get(member_file(m)):
                raise InvalidInputError(
                    "does not match the sha256 in ensemble.json (written by an interrupted "
                    "training, or changed since): rerun the same confide train command",
                    file=str(f))
            blobs.append(data)
        _check_same_layers(info, blobs)
        tensors_of = []
        for m, data in enumerate(blobs):
            try:
                tensors_of.append(load(data))
            except SafetensorError as exc:
                raise InvalidInputError(f"not a safetensors file: {exc}",
                                        file=str(info.path / member_file(m))) from exc
        layers = build_layers(info, backend.model)
        try:
            for m, tensors in enumerate(tensors_of):
                layers.load_state(m, tensors)
        except Exception:
            layers.detach()
            raise
        return cls(backend, layers, info)

    @property
    def count(self) -> int:
        """Members (for mc-dropout: passes)."""
        return self.info.count

    @property
    def method(self) -> str:
        """``lora``, ``sve`` or ``mc-dropout``."""
        return self.info.method

    @property
    def provenance(self) -> dict[str, Any]:
        """``ensemble.json`` as a dict: base model, data file and hash, seeds, steps, losses."""
        return self.info.as_dict()

    @property
    def split(self) -> int:
        """The first decoder layer a member changes: the layers below it run once for all
        members (0: every layer is a member's own, the whole batch is repeated)."""
        return self.layers.first_layer

    def decoder_pass(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     position_ids: torch.Tensor, **kwargs: Any) -> Any:
        """The decoder over ``B`` rows under every member: an output of ``M·B`` rows, rows
        ``m·B .. m·B + B - 1`` member ``m``'s.

        Below :attr:`split` the layers run once over the ``B`` rows; at layer ``split`` a
        pre-hook repeats the hidden states ``M`` times along the batch axis, and at every
        layer above it the attention mask, positions and position embeddings the decoder
        hands its layers (made for ``B`` rows). With ``split = 0`` the inputs themselves
        are repeated. ``kwargs`` go to the decoder (``use_cache``, a cache whose layers
        below ``split`` hold ``B`` rows or one row, and ``M·B`` or ``M`` rows above).
        Call it under ``torch.inference_mode()`` (or with gradients, to train).
        """
        count, split = self.count, self.split
        decoder = self.backend.model.get_decoder()
        with self.layers.rows(list(range(count))):
            if not split:
                return decoder(input_ids=input_ids.repeat(count, 1),
                               attention_mask=attention_mask.repeat(count, 1),
                               position_ids=position_ids.repeat(count, 1), **kwargs)
            rows = input_ids.shape[0]
            memo: dict[int, Any] = {}

            def wide(value: Any) -> Any:
                if isinstance(value, (tuple, list)):
                    return type(value)(wide(v) for v in value)
                if not isinstance(value, torch.Tensor) or value.ndim == 0 \
                        or value.shape[0] != rows:
                    return value  # None, or broadcast over the rows
                if id(value) not in memo:  # each layer gets the same tensors: repeat once
                    memo[id(value)] = (value, value.repeat(count, *[1] * (value.ndim - 1)))
                return memo[id(value)][1]

            def expand(module: Any, args: tuple[Any, ...], kw: dict[str, Any]
                       ) -> tuple[tuple[Any, ...], dict[str, Any]]:
                kw = {k: wide(v) if k in _PER_ROW else v for k, v in kw.items()}
                if module is first:  # the hidden states: once, where the members begin
                    if args:
                        args = (wide(args[0]), *args[1:])
                    else:
                        kw["hidden_states"] = wide(kw["hidden_states"])
                return args, kw

            if self._stack is None:
                self._stack = [layer for _, layer in decoder_layers(self.backend.model)]
            stack = self._stack
            first = stack[split]
            hooks = [layer.register_forward_pre_hook(expand, with_kwargs=True)
                     for layer in stack[split:]]
            try:
                return decoder(input_ids=input_ids, attention_mask=attention_mask,
                               position_ids=position_ids, **kwargs)
            finally:
                for hook in hooks:
                    hook.remove()

    def forward_all(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                    start: int = 0, max_tokens: int = FORWARD_TOKENS) -> torch.Tensor:
        """Every member's next-token logits over a batch (:meth:`decoder_pass`).

        Each pass takes as many rows as keep ``M × rows × T`` within ``max_tokens`` (at
        least one row); the chunks' logits are joined. LoRA rows are routed to their
        adapter (peft's mixed-adapter batches: the base layer once, each adapter on its
        block), SVE layers apply member ``m``'s singular values to block ``m``, MC dropout
        applies mask ``m`` to block ``m``. Members that adapt the top :math:`K` of
        :math:`N` layers cost :math:`(N - K) + M K` layer-passes of the rows; members of
        every layer one pass of ``M`` times the rows (about ``M`` times a pass on a CPU,
        less on a GPU that the rows do not fill). Logits are projected in float32
        (:meth:`~confide.backends.hf.HFBackend.float32_logits`).

        Parameters
        ----------
        input_ids, attention_mask : (B, T) tensors, padded on either side (positions
            count the attended tokens, as the backend's own passes do).
        start : first position whose logits are returned (teacher forcing needs only the
            answer's positions; the rest are not projected onto the vocabulary).
        max_tokens : most member rows x tokens of one pass (:data:`FORWARD_TOKENS`).

        Returns
        -------
        torch.Tensor : (M, B, T - start, V) float32 logits; ``[m, b, t]`` predicts token
        ``start + t + 1`` of row ``b`` under member ``m``.
        """
        if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
            raise InvalidInputError("input_ids and attention_mask must be (batch, tokens) "
                                    "of the same shape", field="input_ids")
        device = self.backend.device
        count, (b, t) = self.count, input_ids.shape
        per = max(1, max_tokens // max(1, count * t))
        chunks = []
        for lo in range(0, b, per):
            ids = input_ids[lo:lo + per].to(device)
            mask = attention_mask[lo:lo + per].to(device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                out = self.decoder_pass(ids, mask, positions, use_cache=False)
                logits = self.backend.float32_logits(out.last_hidden_state[:, start:, :])
            chunks.append(logits.reshape(count, ids.shape[0], t - start, -1))
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1)

    def close(self) -> None:
        """Remove the members from the backend's model (the base model is as before)."""
        self.layers.detach()

    def __enter__(self) -> EnsembleMembers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
