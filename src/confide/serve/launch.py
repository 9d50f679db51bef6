"""Load the upstream model, the fitted decisions, and run the server with uvicorn."""

from __future__ import annotations

from typing import Any

from confide.backends import load_backend
from confide.core.errors import InvalidInputError
from confide.core.reasoning import reasoning_tags as reasoning_tags_of
from confide.pipeline.streaming import EarlyAbstention
from confide.runs.claims import ClaimConfig
from confide.scorers import SCORERS
from confide.scorers.claims import DEFAULT_CLAIM_SCORERS
from confide.serve.app import DEFAULT_ABSTAIN_MESSAGE, create_app
from confide.serve.decisions import load_calibrator, load_policy
from confide.serve.models import Limits

__all__ = ["build_app", "serve"]


def build_app(*, model: str, backend: str = "hf", base_url: str | None = None,
              api_key_env: str = "OPENAI_API_KEY", scorers: tuple[str, ...] | None = None,
              calibrator: str | None = None, policy: str | None = None,
              abstain_message: str | None = None, limits: Limits | None = None,
              timeout: float = 120.0, concurrency: int = 8, max_batch: int = 1,
              early_abstain_below: float | None = None, early_abstain_after: int = 4,
              summary_samples: int = 0, long_form: bool = False,
              log_run: str | None = None,
              reasoning_tags: tuple[str, str] | str | None = None) -> Any:
    """The FastAPI app for ``confide serve`` (model loaded, decisions loaded).

    ``reasoning_tags`` (``"<think>,</think>"``; None or ``"none"``: off): each reply is
    split into its trace (``message.reasoning_content``) and final answer (``content``,
    the one scored), as :func:`~confide.serve.app.create_app` says.

    ``log_run``: store every reply as a record of the run in that directory
    (:mod:`confide.serve.traffic`).

    ``long_form``: each reply lists the answer's claims with their confidences
    (the claim scorers that need no samples, so a reply costs no extra sampling).
    """
    # options are checked before the model loads (same rules as the API and requests)
    early = None if early_abstain_below is None else EarlyAbstention(early_abstain_below,
                                                                     early_abstain_after)
    tags = reasoning_tags_of(reasoning_tags)

    options: dict[str, Any] = {}
    if backend == "openai":
        options = {"base_url": base_url, "api_key_env": api_key_env,
                   "concurrency": concurrency, "timeout": timeout}
    elif base_url is not None:
        raise InvalidInputError("--base-url is for --backend openai", field="base_url")
    else:
        options = {"batch_size": max_batch}
    cal = load_calibrator(calibrator) if calibrator else None
    pol = load_policy(policy) if policy else None
    loaded = load_backend(backend, model, **options)
    claims = None
    if long_form:
        claims = ClaimConfig(grader=None, scorers=tuple(
            s for s in DEFAULT_CLAIM_SCORERS if not SCORERS[s].n_samples))
    return create_app(loaded, scorers=scorers, calibrator=cal, policy=pol,
                      abstain_message=abstain_message or DEFAULT_ABSTAIN_MESSAGE,
                      limits=limits, timeout=timeout, max_batch=max_batch,
                      early_abstention=early, summary_samples=summary_samples, claims=claims,
                      log_run=log_run, reasoning_tags=tags)


def serve(app: Any, *, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "info") -> None:
    """Run ``app`` with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level)
