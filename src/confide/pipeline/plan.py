"""The run plan: what a run is made of, decided once, before any model is loaded.

:func:`prepare` checks a :class:`RunConfig` (the settings a user gives, stored
with the run) and returns a frozen :class:`RunPlan`: the loaded task, the
grader, the generation spec, the judge and the seed. The CLI, the API and the
server all build their plans here, so the three rules that decide what is
generated exist once:

* **samples** (:func:`sample_count`): the number asked for, else the most any
  chosen scorer needs (and at least a caller's floor: a claim stage, a
  request's ``n``, the server's summary samples);
* **sampling defaults**: :data:`~confide.core.options.DEFAULT_TEMPERATURE` and
  :data:`~confide.core.options.DEFAULT_TOP_P` unless a run or request sets them
  (:func:`generation_spec`);
* **the grader**: the run's own, else its task's (:attr:`RunPlan.grader`).

A reasoning run (``reasoning_tags``, ``confide run --reasoning-tags "<think>,</think>"``)
keeps a reply's trace and final answer apart (:mod:`confide.core.reasoning`): the tags
ride on the generation spec (:attr:`GenerationSpec.reasoning_tags
<confide.backends.base.GenerationSpec.reasoning_tags>`) and the pipeline splits every
answer by them. ``task_options["prompt"] = "cot"`` gives a reasoning task (GSM8K) the
k-shot chain-of-thought prompt (:func:`confide.tasks.prompts.chain_of_thought`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from confide.backends import GenerationSpec
from confide.core.errors import InvalidInputError
from confide.core.options import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LIMIT,
    DEFAULT_MODEL,
    DEFAULT_TASK,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    check_option,
    check_sampling,
)
from confide.core.reasoning import DEFAULT_TAGS, Tags
from confide.core.reasoning import reasoning_tags as parse_tags
from confide.core.records import Item
from confide.equivalence.judges import JUDGES, default_judge
from confide.grading import GRADERS
from confide.pipeline.answering import DEFAULT_SCORERS, check_question
from confide.scorers import SCORERS, ScorerSpec, scorer_at
from confide.tasks import Task, load_task
from confide.tasks.prompts import PROMPT_STYLES, chain_of_thought

__all__ = ["DEFAULT_SCORERS", "ENSEMBLE_GREEDY", "QUESTIONS_GRADER", "RunConfig", "RunPlan",
           "ensemble_identity", "generation_spec", "prepare", "question_plan", "sample_count"]

# Plain questions (``confide.score``, the server) have no task: they are open QA, and
# read with this grader when references come with them.
QUESTIONS_GRADER = "contains"


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's numbers (stored with the run).

    The defaults are ``confide run``'s (:mod:`confide.core.options`). ``limit``: the
    first that many items; 0 or None: every item (stored as None, so both name one run).
    ``reasoning_tags``: a reasoning model's trace tags (``("<think>", "</think>")``, or the
    text ``"<think>,</think>"``); None (default) or ``"none"``: answers are read whole,
    except with ``task_options["prompt"] = "cot"``, whose traces are in ``<think>`` tags
    (None gives those tags; ``"none"`` is refused). On, every answer and sample is split
    into trace and final answer, and scorers of the trace (``Need.TRACE``) run.
    ``ensemble``: an ensemble directory (``confide train``; hf backend only): every answer
    is also scored under each member (:mod:`confide.backends.hf.ensemble`), and the
    members' provenance and file hashes are part of the run's settings
    (:func:`ensemble_identity`: a resume with other members is refused);
    ``ensemble_greedy``: the greedy answer is the base model's (``"base"``, default: the
    answer the deployed model gives, one pass cheaper) or the members' mean's (``"mean"``).
    """

    model: str = DEFAULT_MODEL
    backend: str = "hf"
    task: str = DEFAULT_TASK
    data_path: str | None = None
    limit: int | None = DEFAULT_LIMIT
    scorers: tuple[str, ...] = DEFAULT_SCORERS
    grader: str | None = None
    max_new_tokens: int | None = None
    n_samples: int | None = None
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    hidden_layers: tuple[int, ...] = ()
    batch_size: int = DEFAULT_BATCH_SIZE
    seed: int = 0
    task_options: dict[str, Any] = field(default_factory=dict)
    judge: str | None = None  # semantic scorers' equivalence judge; None: the task's default
    judge_options: dict[str, Any] = field(default_factory=dict)
    on_bad_record: str = "raise"  # "skip": skip malformed data records, counted in Task.skipped
    reasoning_tags: Tags | None = None
    ensemble: str | None = None  # an ensemble directory (confide train): members score answers
    ensemble_greedy: str = "base"  # the greedy answer: "base" model's or the members' "mean"

    def __post_init__(self) -> None:
        # Refuse a bad option before anything is loaded or stored (rules: confide.core.options).
        for name, value in (("batch_size", self.batch_size), ("temperature", self.temperature),
                            ("top_p", self.top_p), ("seed", self.seed),
                            ("max_new_tokens", self.max_new_tokens),
                            ("n_samples", self.n_samples)):
            if value is not None:
                check_option(name, value)
        if self.limit is not None and (isinstance(self.limit, bool)
                                       or not isinstance(self.limit, int) or self.limit < 0):
            raise InvalidInputError(f"must be a positive integer, or 0 for all, not "
                                    f"{self.limit!r}", field="limit")
        if self.limit == 0:  # 0 means all, as `confide run --limit 0`: one stored form
            object.__setattr__(self, "limit", None)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in self.hidden_layers):
            raise InvalidInputError(f"must be integers, not {list(self.hidden_layers)!r}",
                                    field="hidden_layers")
        if self.on_bad_record not in ("raise", "skip"):
            raise InvalidInputError(f"must be 'raise' or 'skip', not {self.on_bad_record!r}",
                                    field="on_bad_record")
        _check_ensemble(self)
        # one stored form: a pair of tags or None ("none", False and None alike)
        asked = self.reasoning_tags
        object.__setattr__(self, "reasoning_tags", parse_tags(asked))
        if self.task_options.get("prompt") == "cot" and self.reasoning_tags is None:
            if asked is not None:  # turned off by name: the trace would be graded
                raise InvalidInputError("the cot prompt writes a trace in <think> tags: it "
                                        "needs reasoning tags, not 'none'",
                                        field="reasoning_tags")
            object.__setattr__(self, "reasoning_tags", DEFAULT_TAGS)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["scorers"] = list(self.scorers)
        d["hidden_layers"] = list(self.hidden_layers)
        if self.ensemble is None:  # a run without an ensemble keeps its stored settings
            del d["ensemble"], d["ensemble_greedy"]
        if self.reasoning_tags is None:  # a run without reasoning keeps its stored settings
            del d["reasoning_tags"]
        else:
            d["reasoning_tags"] = list(self.reasoning_tags)
        return d


#: Where a run's greedy answer comes from with an ensemble (``--ensemble-greedy``).
ENSEMBLE_GREEDY = ("base", "mean")
#: What of ``ensemble.json`` names the members a run used (resume refuses other members).
_ENSEMBLE_KEYS = ("method", "members", "base", "data", "member_seeds", "settings", "steps",
                  "steps_done", "files")


def _check_ensemble(config: RunConfig) -> None:
    """``ensemble`` with the hf backend only, and a known greedy source."""
    if config.ensemble_greedy not in ENSEMBLE_GREEDY:
        raise InvalidInputError(f"must be one of {', '.join(ENSEMBLE_GREEDY)}, not "
                                f"{config.ensemble_greedy!r}", field="ensemble_greedy")
    if config.ensemble is None:
        if config.ensemble_greedy != "base":
            raise InvalidInputError("the members' mean greedy answer needs an ensemble "
                                    "(--ensemble DIR)", field="ensemble_greedy")
        return
    if not isinstance(config.ensemble, str) or not config.ensemble:
        raise InvalidInputError(f"must be an ensemble directory, not {config.ensemble!r}",
                                field="ensemble")
    if config.backend != "hf":
        raise InvalidInputError(
            f"ensemble members score answers with the hf backend only, not "
            f"{config.backend!r}: the members run inside the local transformers model "
            "(for vLLM, serve the members as LoRA adapters and import per-member "
            "log-probabilities with confide score: see confide.backends.vllm)",
            field="ensemble")


def ensemble_identity(path: str) -> dict[str, Any]:
    """What names the members of ensemble directory ``path`` in a run's settings: the
    method, base model, training data, seeds, settings, steps and each member file's
    sha256 from ``path/ensemble.json`` (read here without loading torch; the files are
    checked against these hashes when the members load).

    Raises
    ------
    InvalidInputError : ``path/ensemble.json`` is missing or not a JSON object.
    """
    file = Path(path) / "ensemble.json"
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InvalidInputError(f"no ensemble here: train one with confide train MODEL "
                                f"--out {path}", file=str(file)) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"not readable JSON: {exc}", file=str(file)) from exc
    if not isinstance(raw, dict):
        raise InvalidInputError("expected a JSON object", file=str(file))
    return {key: raw.get(key) for key in _ENSEMBLE_KEYS}


def sample_count(scorers: Iterable[str | ScorerSpec], *, requested: int | None = None,
                 at_least: int = 0) -> int:
    """Samples to draw: ``requested`` when given, else the most any scorer needs and at
    least ``at_least``.

    >>> sample_count(["msp", "mean_logprob"])
    0
    >>> sample_count(["msp"], at_least=3)
    3
    >>> sample_count(["msp"], requested=5, at_least=3)
    5
    """
    if requested is not None:
        return requested
    specs = [SCORERS[s] if isinstance(s, str) else s for s in scorers]
    return max([at_least, *(spec.n_samples for spec in specs)])


def generation_spec(scorers: Iterable[str | ScorerSpec], *, max_new_tokens: int,
                    stop: Sequence[str] = (), n_samples: int | None = None, at_least: int = 0,
                    temperature: float | None = None, top_p: float | None = None,
                    hidden_layers: Sequence[int] = (),
                    top_k_alternatives: int | None = None,
                    reasoning_tags: Tags | None = None) -> GenerationSpec:
    """The generation spec of a run or a request: :func:`sample_count` samples, drawn at
    the given temperature and top-p or the defaults; ``reasoning_tags`` for a reasoning
    run (None: off)."""
    spec = GenerationSpec(
        max_new_tokens=max_new_tokens, stop=tuple(stop),
        n_samples=sample_count(scorers, requested=n_samples, at_least=at_least),
        temperature=DEFAULT_TEMPERATURE if temperature is None else temperature,
        top_p=DEFAULT_TOP_P if top_p is None else top_p,
        hidden_layers=tuple(hidden_layers), reasoning_tags=reasoning_tags)
    if top_k_alternatives is None:
        return spec
    return replace(spec, top_k_alternatives=top_k_alternatives)


@dataclass(frozen=True)
class RunPlan:
    """A checked run: task, grader, generation spec, scorers, judge and seed.

    ``config`` is the :class:`RunConfig` it came from (``None`` for plain
    questions, :func:`question_plan`); ``grader`` is ``None`` when nothing is
    graded.
    """

    task: Task
    grader: str | None
    spec: GenerationSpec
    scorers: tuple[str, ...]
    judge: str
    judge_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    config: RunConfig | None = None

    def identity(self) -> dict[str, Any]:
        """What the store keeps as the run's configuration (a resume must match it)."""
        if self.config is None:
            raise InvalidInputError("plain questions are not a stored run", field="config")
        d = self.config.to_dict()
        d["task"] = self.task.config()
        d["grader"] = self.grader
        if self.config.ensemble is not None:
            d["ensemble_members"] = ensemble_identity(self.config.ensemble)
        return d

    def block(self, start: int) -> list[Item]:
        """The fixed block of items at ``start`` (its neighbours fix its numbers)."""
        return self.task.items[start:start + self.batch_size]

    def todo_blocks(self, done: set[str]) -> list[int]:
        """Starts of the fixed blocks (``batch_size`` items in item order) with an item
        not in ``done``."""
        return [start for start in range(0, len(self.task.items), self.batch_size)
                if not all(it.id in done for it in self.block(start))]


def prepare(config: RunConfig) -> RunPlan:
    """Check the run's names and options and load its task.

    Nothing is loaded but the task and nothing is stored, so a typo fails at once.
    """
    for name in config.scorers:  # fail on a typo (or a claim-level name) before loading
        scorer_at(name, "answer")
    if config.ensemble is not None:  # a missing or unreadable ensemble.json fails now
        ensemble_identity(config.ensemble)
    if config.judge is not None:
        JUDGES[config.judge]
    options = dict(config.task_options)
    style = options.pop("prompt") if options.get("prompt") in PROMPT_STYLES else None
    task = load_task(config.task, limit=config.limit, data_path=config.data_path,
                     on_bad_record=config.on_bad_record, **options)
    if style == "cot":
        chain_of_thought(task)
    grader = config.grader or task.grader
    GRADERS[grader]
    for item in task.items:
        check_question(item)
    spec = generation_spec(config.scorers,
                           max_new_tokens=config.max_new_tokens or task.max_new_tokens,
                           stop=task.stop, n_samples=config.n_samples,
                           temperature=config.temperature, top_p=config.top_p,
                           hidden_layers=config.hidden_layers,
                           reasoning_tags=config.reasoning_tags)
    check_sampling(spec.n_samples, spec.temperature)
    return RunPlan(task=task, grader=grader, spec=spec, scorers=tuple(config.scorers),
                   judge=config.judge or default_judge(task.grader),
                   judge_options=dict(config.judge_options), seed=config.seed,
                   batch_size=config.batch_size, config=config)


def scorer_names(scorers: str | Sequence[str]) -> tuple[str, ...]:
    """Scorer names from a sequence, or from one string of comma-separated names (as the
    CLI takes them): ``"msp"`` is one scorer, never the letters m, s, p."""
    if isinstance(scorers, str):
        return tuple(s.strip() for s in scorers.split(",") if s.strip())
    return tuple(scorers)


def question_plan(questions: str | Item | Sequence[str | Item], *,
                  scorers: str | Sequence[str] = DEFAULT_SCORERS,
                  max_new_tokens: int, stop: Sequence[str] = (), seed: int = 0,
                  at_least: int = 0, judge: str = "exact",
                  reasoning_tags: Tags | str | None = None) -> RunPlan:
    """The plan of plain questions (``confide.score``, ``confide.stream``, the server):
    open QA, ungraded, ``question_id`` ``q0``, ``q1``, ... unless given as items. One
    question (a string or an :class:`Item`) is a list of one, never its characters.
    ``reasoning_tags``: as :attr:`RunConfig.reasoning_tags` (on the plan's spec)."""
    if isinstance(questions, (str, Item)):
        questions = [questions]
    scorers = scorer_names(scorers)
    items = [q if isinstance(q, Item) else Item(id=f"q{i}", prompt=q)
             for i, q in enumerate(questions)]
    for name in scorers:
        scorer_at(name, "answer")
    for item in items:
        check_question(item)
    task = Task(name="questions", items=items, grader=QUESTIONS_GRADER, format="open_qa")
    spec = generation_spec(scorers, max_new_tokens=max_new_tokens, stop=stop,
                           at_least=at_least, reasoning_tags=parse_tags(reasoning_tags))
    return RunPlan(task=task, grader=None, spec=spec, scorers=tuple(scorers), judge=judge,
                   seed=seed, batch_size=max(1, len(items)))
