"""Request and reply shapes of ``confide serve`` (a subset of the OpenAI chat and completions APIs).

Requests are validated by pydantic; fields the OpenAI API has but confide does
not use (``user``, ``presence_penalty``, ...) are accepted and ignored, so an
unchanged client keeps working. Server limits (``n``, ``max_tokens``, prompt
size) are checked against :class:`Limits` by the app, which answers 400 with
the field named. Every text a request carries (model name, messages, prompt, stop
sequences) must be valid Unicode: a lone surrogate (the JSON escape ``"\\udcff"``
is valid JSON but half of a UTF-16 pair) is refused with 400 naming the field, before
anything is generated or stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from confide.core.options import RANGES, check_option, check_stop

__all__ = ["ChatCompletionRequest", "ChatMessage", "CompletionRequest", "ConfideOptions",
           "Limits", "StreamOptions", "TextPart", "valid_unicode"]


@dataclass(frozen=True)
class Limits:
    """What one request may ask for.

    ``max_n`` and ``max_tokens`` are the limits a request is held to, and the ones its
    error quotes ("n: at most 8 choices per request"); they lie within confide's
    general ranges (``confide.core.options.RANGES``: ``n``, ``max_new_tokens``), which
    the request models check only from below, so a request over the server's
    limit is never told the general one.
    """

    max_n: int = 8
    max_tokens: int = 512
    default_max_tokens: int = 64
    max_prompt_chars: int = 32_000
    max_messages: int = 64
    max_body_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        check_option("n", self.max_n, field="max_n")
        check_option("max_new_tokens", self.max_tokens, field="max_tokens")
        check_option("max_new_tokens", self.default_max_tokens, field="default_max_tokens")


class TextPart(BaseModel):
    """One part of a message's content; only text parts are served."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


def valid_unicode(value: Any) -> Any:
    """``value`` (a text, a list of texts or of text parts, or None) if every text in it
    is valid Unicode; else a ``ValueError`` (pydantic's 400, naming the field) that
    says which item, where, and what to send instead.

    >>> valid_unicode(["fine", "also fine"])
    ['fine', 'also fine']
    """
    texts = value if isinstance(value, list) else [value]
    for i, text in enumerate(texts):
        text = text.text if isinstance(text, TextPart) else text
        if not isinstance(text, str):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            where = f"item {i}, " if isinstance(value, list) else ""
            raise ValueError(
                f"text that is not valid Unicode ({where}character {exc.start}: a lone "
                f"surrogate \\u{ord(text[exc.start]):04x}, half of a UTF-16 pair); send the "
                "text as UTF-8, or escape both halves of the pair") from None
    return value


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    @field_validator("content", "name")
    @classmethod
    def _unicode(cls, value: Any) -> Any:
        return valid_unicode(value)

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ConfideOptions(BaseModel):
    """confide's own request options, sent as ``"confide": {...}`` (the openai client's
    ``extra_body``); they override the server's defaults for this request."""

    model_config = ConfigDict(extra="forbid")
    early_abstain_below: float | None = None
    early_abstain_after: int | None = None

    @field_validator("early_abstain_below", "early_abstain_after")
    @classmethod
    def _ranged(cls, value: Any, info: Any) -> Any:
        return None if value is None else check_option(info.field_name, value, field="")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool | None = None


def _at_least(name: str, value: Any) -> Any:
    """``check_option`` without the general upper bound: an integer above it is left to the
    server's own, smaller limit (:class:`Limits`, checked by the app), whose error quotes
    the limit actually enforced."""
    high = RANGES[name].high
    if isinstance(value, int) and not isinstance(value, bool) and high is not None \
            and value > high:
        return value
    return check_option(name, value, field="")


class GenerationRequest(BaseModel):
    """The fields chat and text completions share."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=256)
    max_tokens: int | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    confide: ConfideOptions | None = None

    # The ranges are confide's, shared with the CLI and the API (confide.core.options);
    # an InvalidInputError is a ValueError, which pydantic turns into a 400.
    @field_validator("max_tokens")
    @classmethod
    def _budget(cls, value: int | None) -> int | None:
        return None if value is None else _at_least("max_new_tokens", value)

    @field_validator("n")
    @classmethod
    def _choices(cls, value: int) -> int:
        return _at_least("n", value)

    @field_validator("temperature", "top_p")
    @classmethod
    def _ranged(cls, value: Any, info: Any) -> Any:
        return None if value is None else check_option(info.field_name, value, field="")

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        check_stop(valid_unicode(value))
        return value

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        return valid_unicode(value)

    def stop_list(self) -> tuple[str, ...]:
        return check_stop(self.stop)

    def answer_budget(self, limits: Limits) -> int:
        return self.max_tokens or limits.default_max_tokens

    @property
    def top_k(self) -> int:
        """Top alternatives asked per token (0: none)."""
        return 0

    @property
    def wants_logprobs(self) -> bool:
        return False


class ChatCompletionRequest(GenerationRequest):
    """``POST /v1/chat/completions`` body."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None

    @field_validator("max_completion_tokens")
    @classmethod
    def _completion_budget(cls, value: int | None) -> int | None:
        return None if value is None else _at_least("max_new_tokens", value)

    @field_validator("top_logprobs")
    @classmethod
    def _top(cls, value: int | None) -> int | None:
        return None if value is None else check_option("top_logprobs", value, field="")

    def answer_budget(self, limits: Limits) -> int:
        return self.max_completion_tokens or self.max_tokens or limits.default_max_tokens

    @property
    def top_k(self) -> int:
        return (self.top_logprobs or 0) if self.logprobs else 0

    @property
    def wants_logprobs(self) -> bool:
        return bool(self.logprobs)


class CompletionRequest(GenerationRequest):
    """``POST /v1/completions`` body (one text prompt; ``logprobs`` is the number of top
    alternatives per token, as in the OpenAI completions API)."""

    prompt: str | list[str]
    logprobs: int | None = None
    echo: bool | None = None

    @field_validator("logprobs")
    @classmethod
    def _top(cls, value: int | None) -> int | None:
        return None if value is None else check_option("top_logprobs", value, field="")

    @field_validator("prompt")
    @classmethod
    def _unicode(cls, value: str | list[str]) -> str | list[str]:
        return valid_unicode(value)

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def top_k(self) -> int:
        return self.logprobs or 0

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None


def error_body(message: str, *, kind: str = "invalid_request_error",
               param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape the official clients read."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
