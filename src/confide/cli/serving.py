"""``confide serve``: the OpenAI-compatible server with confidences.

The command imports :mod:`confide.api` in its body, not at the top, so that
``confide --help`` loads no model code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from confide.cli.app import app, err_console, output_dir, user_errors
from confide.core.options import DEFAULT_MODEL


@app.command()
def serve(
    model: Annotated[str, typer.Option(help="hf: bundled alias, .gguf, dir or hub id; "
                                            "openai: the upstream's model name")
                     ] = DEFAULT_MODEL,
    backend: Annotated[str, typer.Option(help="hf (local model) or openai (upstream URL)")
                       ] = "hf",
    base_url: Annotated[Optional[str], typer.Option(help="--backend openai: upstream API root")
                        ] = None,
    api_key_env: Annotated[str, typer.Option(help="variable holding the upstream API key")
                           ] = "OPENAI_API_KEY",
    scorers: Annotated[Optional[str], typer.Option(help="comma-separated scorer names")] = None,
    calibrator: Annotated[Optional[Path], typer.Option(help="fitted calibrator (JSON)")] = None,
    policy: Annotated[Optional[Path], typer.Option(help="fitted abstention policy (JSON)")
                      ] = None,
    abstain_message: Annotated[Optional[str], typer.Option(
        help="reply content when the policy abstains")] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    max_n: Annotated[int, typer.Option(help="most choices per request")] = 8,
    max_tokens: Annotated[int, typer.Option(help="largest max_tokens a request may ask")] = 512,
    max_prompt_chars: Annotated[int, typer.Option(help="largest prompt, in characters")
                                ] = 32_000,
    timeout: Annotated[float, typer.Option(help="seconds the model may take (then 504)")
                       ] = 120.0,
    max_batch: Annotated[int, typer.Option(
        help="hf: requests generated together; above 1 a reply's confidences depend on "
             "its batch neighbours (see confide.serve.app)")] = 1,
    long_form: Annotated[bool, typer.Option(
        "--long-form", help="list each answer's claims with their confidences")] = False,
    early_abstain_below: Annotated[Optional[float], typer.Option(
        help="stop an answer once its running confidence (geometric-mean token "
             "probability) falls below this, and abstain")] = None,
    early_abstain_after: Annotated[int, typer.Option(
        help="tokens generated before early abstention may stop an answer")] = 4,
    summary_samples: Annotated[int, typer.Option(
        help="samples drawn per request for the summary (0: only when drawn anyway)")
                               ] = 0,
    log_run: Annotated[Optional[Path], typer.Option(
        help="store every request and reply in this run directory, to label (confide "
             "label) and evaluate (confide eval/report) later; a restart appends")] = None,
    reasoning_tags: Annotated[str, typer.Option(
        help="tags of a reasoning model's trace ('<open>,<close>'): replies carry the trace "
             "as reasoning_content and the final answer, which is scored, as content; none "
             "(default): replies are read whole")] = "none",
) -> None:
    """Serve a model over an OpenAI-compatible API, with confidences in every reply."""
    from confide import api

    chosen = tuple(s.strip() for s in scorers.split(",") if s.strip()) if scorers else None
    if log_run is not None:  # before the model loads
        log_run = output_dir(log_run, "--log-run")
    with user_errors():
        server = api.build_server(model, backend=backend, base_url=base_url,
                                  api_key_env=api_key_env, scorers=chosen,
                                  calibrator=str(calibrator) if calibrator else None,
                                  policy=str(policy) if policy else None,
                                  abstain_message=abstain_message, max_n=max_n,
                                  max_tokens=max_tokens, max_prompt_chars=max_prompt_chars,
                                  timeout=timeout, max_batch=max_batch, long_form=long_form,
                                  early_abstain_below=early_abstain_below,
                                  early_abstain_after=early_abstain_after,
                                  summary_samples=summary_samples,
                                  log_run=str(log_run) if log_run else None,
                                  reasoning_tags=reasoning_tags)
    err_console.print(f"serving {model} on http://{host}:{port}/v1")
    api.run_server(server, host=host, port=port)
