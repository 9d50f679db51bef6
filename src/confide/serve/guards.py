"""What a request must pass before it reaches the model: body size, ``n``, token and
prompt limits; and the error every refusal raises (answered in the OpenAI error shape)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from confide.serve.models import GenerationRequest, Limits, error_body

__all__ = ["BodyLimit", "RequestError", "check_limits", "check_size"]


class RequestError(Exception):
    """A request refused or failed: the HTTP status and the OpenAI error fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = (
            status, message, param, kind, code)


class BodyLimit:
    """Refuse a request body over ``max_bytes`` with 413, counting bytes as they arrive.

    A declared Content-Length over the limit is refused before anything is read;
    a chunked body (no length) is read only up to the limit, so one request never
    holds more than ``max_bytes`` of body in memory, whatever its transfer encoding.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, f"{int(declared)} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any, size: str) -> None:
        reply = JSONResponse(error_body(
            f"request body of {size} exceeds the limit of {self.max_bytes} bytes",
            code="request_too_large"), status_code=413, headers={"connection": "close"})
        await reply(scope, receive, send)


def check_limits(body: GenerationRequest, limits: Limits) -> None:
    if body.n > limits.max_n:
        raise RequestError(400, f"n: at most {limits.max_n} choices per request, got {body.n}",
                            param="n")
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name, None)
        if value is not None and value > limits.max_tokens:
            raise RequestError(400, f"{name}: at most {limits.max_tokens}, got {value}",
                                param=name)


def check_size(size: int, limits: Limits, param: str = "messages") -> None:
    if size > limits.max_prompt_chars:
        raise RequestError(400, f"{param}: the prompt has {size} characters; the limit is "
                                 f"{limits.max_prompt_chars}", param=param,
                            code="context_length_exceeded")
