"""The ingress: an OpenAI-compatible API that sends each request to `champion` or `canary` by weight.

The weight and the mirror and shadow shares live in this deployment's `user_config`: the rollout
changes them with a light in-place update (`reconfigure`), every router replica gets the same value,
and a replica the controller restarts starts from it, never from a default in its own memory.

Two copies of a request that no user sees, both flagged `mirror` in the request log:
- mirror: a share of the requests routed to the canary is also sent to the champion once the canary
  has answered (the user gets the canary's answer);
- shadow: a share of the requests routed to the champion is also sent to the canary at the same
  moment (Argo Rollouts' setMirrorRoute, Istio's mirroring): at a 5 % step the canary gets a sample
  large enough to test without more users seeing its answers; on a CPU it runs on the core the
  idle canary would leave unused.
Each pair of answers goes to the mirror log with the champion's score of both (mean negative
log-likelihood per token under the champion's model: the rollout's likelihood judge).
Every request, routed or copied, is one line in the request log (the window the rollout analyses),
every text field redacted before it is written.

In front of the engines it is a thin ingress: answers stream through chunk by chunk (with `usage`
when the client asks for it), an engine's refusal keeps its status and OpenAI error body (a prompt
beyond the context is the engine's 400), a request carrying `user` (or an `x-session-id` header)
always lands on the same arm at a given weight, so a conversation stays on one model, and past
`max_queue` requests in flight a request is refused with 429 and `Retry-After` rather than queued
without bound. Every request is answered, refused with a status, or logged as failed: none is lost
silently. The drill's faults (`faults.py`) are applied here, to what goes to the canary.
"""


import asyncio
import hashlib
import hmac
import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from quantgate.tasks.serving.faults import Faults, InjectedFault, garble
from quantgate.tasks.serving.protocol import (
    ApiError,
    Prompt,
    chunk_body,
    completion_body,
    parse_request,
    to_prompt,
    usage_body,
)
from quantgate.tasks.traffic.redact import redact

api = FastAPI(title="quantgate serving", docs_url=None, redoc_url=None)


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:  # one write per line: lines from replicas never mix
        f.write(json.dumps(record) + "\n")


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def _prompt_text(p: Prompt) -> str:
    return redact(p.text if p.messages is None else "\n".join(m["content"] for m in p.messages)).text


def _error_of(exc: Exception, arm: str) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI error body for a failed call: an engine's own refusal (a 4xx: a prompt
    beyond the context) passes through as it is; anything else is the arm's 500."""
    cause = getattr(exc, "cause", None) or exc  # Ray wraps an arm's exception; `cause` is the original
    status, body = getattr(cause, "status", None), getattr(cause, "body", None)
    if isinstance(status, int) and isinstance(body, dict) and 400 <= status < 500:
        return status, body
    return 500, ApiError(500, f"the {arm} arm failed: {str(exc)[-300:]}", type="server_error").body()


def _with_fault(result: dict[str, Any], fault: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """An answer as the drill's fault makes it look: later by the injected latency, garbled."""
    if not fault:
        return result
    late = fault.get("latency_s", 0.0)
    out = dict(result)
    for key in ("ttft_s", "total_s"):
        if out.get(key) is not None:
            out[key] += late
    if fault.get("garble") and "text" in out:
        out["text"] = garble(out["text"], rng)
    return out


# Helpers above the class: Ray Serve serializes the class when it is decorated, with the module
# globals defined by then (a function defined below it is a NameError inside the replica).
@serve.deployment(max_ongoing_requests=64, graceful_shutdown_timeout_s=5)
@serve.ingress(api)
class Router:
    def __init__(self, champion: DeploymentHandle, canary: DeploymentHandle | None, settings: dict) -> None:
        self.arms = {"champion": champion, **({"canary": canary} if canary is not None else {})}
        self.s = settings
        self.log_dir = Path(settings["log_dir"])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.weight, self.mirror_share, self.shadow_share = 0.0, 0.0, 0.0
        self.faults, self.max_queue = Faults(), 64
        self.rng = random.Random()
        self.background: set[asyncio.Task] = set()
        self.in_flight = 0

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.weight = float(config.get("canary_weight", 0.0)) if "canary" in self.arms else 0.0
        self.mirror_share = float(config.get("mirror_share", 0.0))
        self.shadow_share = float(config.get("shadow_share", 0.0)) if "canary" in self.arms else 0.0
        self.faults = Faults(**config.get("canary_faults", {}))
        self.max_queue = int(config.get("max_queue", 64))

    def _pick_arm(self, sticky_key: str | None) -> str:
        """By weight; with a key (the request's `user`, or its session header), by the key's hash:
        the same key lands on the same arm while the weight stays, and as the weight grows a key
        on the canary stays there (its hash is below the old weight, so below the new one)."""
        u = (int.from_bytes(hashlib.sha256(sticky_key.encode()).digest()[:8], "big") / 2**64
             if sticky_key else self.rng.random())
        return "canary" if u < self.weight else "champion"

    async def _call(self, arm: str, p: Prompt) -> dict[str, Any]:
        """One arm's whole answer, the drill's faults applied to the canary's."""
        fault = self._fault(arm)
        if fault.get("latency_s"):
            await asyncio.sleep(fault["latency_s"])
        if fault.get("fail"):
            raise InjectedFault("injected fault (drill): this request fails on purpose")
        result = await self.arms[arm].generate.remote(p)
        return _with_fault(result, fault, self.rng)

    def _fault(self, arm: str) -> dict[str, Any]:
        if arm != "canary" or not self.faults.active():
            return {}
        return {"latency_s": self.faults.latency_ms / 1000, "fail": self.rng.random() < self.faults.errors,
                "garble": self.rng.random() < self.faults.garbage}

    def _authorize(self, request: Request) -> None:
        key = os.environ.get(self.s["api_key_env"] or "", "") if self.s.get("api_key_env") else ""
        if key:
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), key.encode()):
                raise ApiError(401, "missing or wrong API key", type="authentication_error",
                               code="invalid_api_key")

    def _log(self, arm: str, p: Prompt, request_id: str, status: int, result: dict | None,
             error: str | None, mirror: bool, started: float) -> None:
        rec = {"id": request_id, "t": time.time(), "arm": arm, "mirror": mirror, "status": status,
               "error": error, "weight": self.weight, "e2e_s": time.perf_counter() - started}
        if result:
            rec |= {k: result.get(k) for k in ("total_s", "queue_s", "ttft_s", "tpot_s", "completion_tokens",
                                               "prompt_tokens", "cpu_s")}
        _append(self.log_dir / "requests.jsonl", rec)

    def _background(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def _copy(self, arm: str, p: Prompt, request_id: str) -> dict[str, Any] | None:
        """The other arm's answer to a request a user got from one arm: logged, never returned."""
        started, result, error = time.perf_counter(), None, None
        try:
            result = await self._call(arm, p)
        except Exception as exc:  # a copy's failure is recorded, never the user's problem
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
        self._log(arm, p, request_id, 500 if error else 200, result, error, True, started)
        return result

    async def _keep_pair(self, p: Prompt, request_id: str, source: str, canary: str, champion: str) -> None:
        try:  # the champion's model scores both answers: the likelihood judge's evidence
            nll = await self.arms["champion"].score.remote(p, [canary, champion])
        except Exception:  # a pair without scores still serves an LLM judge
            nll = [None, None]
        _append(self.log_dir / "mirror.jsonl", {
            "id": request_id, "t": time.time(), "source": source, "request": _prompt_text(p),
            "canary": redact(canary).text, "champion": redact(champion).text,
            "canary_nll": nll[0], "champion_nll": nll[1]})

    async def _mirror(self, p: Prompt, request_id: str, canary_text: str) -> None:
        result = await self._copy("champion", p, request_id)
        if result is not None:
            await self._keep_pair(p, request_id, "mirror", canary_text, result["text"])

    async def _shadow(self, shadow: asyncio.Task, p: Prompt, request_id: str,
                      champion_text: str | None) -> None:
        result = await shadow
        if result is not None and champion_text is not None:
            await self._keep_pair(p, request_id, "shadow", result["text"], champion_text)

    def _start_shadow(self, arm: str, p: Prompt, request_id: str) -> asyncio.Task | None:
        """Sent with the champion's request, not after it: both arms work on it at the same time."""
        if arm != "champion" or self.rng.random() >= self.shadow_share:
            return None
        return self._background(self._copy("canary", p, request_id))

    def _after_answer(self, arm: str, p: Prompt, request_id: str, text: str | None,
                      shadow: asyncio.Task | None) -> None:
        if shadow is not None:
            self._background(self._shadow(shadow, p, request_id, text))
        elif arm == "canary" and text is not None and self.rng.random() < self.mirror_share:
            self._background(self._mirror(p, request_id, text))

    async def _handle(self, request: Request, kind: str) -> Any:
        started, request_id = time.perf_counter(), uuid.uuid4().hex
        try:
            self._authorize(request)
            req = parse_request(await request.body(), kind)  # type: ignore[arg-type]
            if req.model not in self.s["model_names"]:
                raise ApiError(404, f"model {req.model!r} does not exist; this server has "
                               f"{sorted(self.s['model_names'])}", param="model", code="model_not_found")
            p = to_prompt(req, default_max_tokens=self.s["default_max_tokens"],
                          max_max_tokens=self.s["max_tokens"], max_prompt_chars=self.s["max_prompt_chars"])
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        arm = self._pick_arm(req.user or request.headers.get("x-session-id"))
        headers = {"x-quantgate-arm": arm, "x-quantgate-request-id": request_id}
        if self.in_flight >= self.max_queue:  # backpressure: refuse before queueing
            self._log(arm, p, request_id, 429, None, "backpressure", False, started)
            return JSONResponse(ApiError(429, f"{self.in_flight} requests in flight, the most this server "
                                         "queues; retry after a second", type="rate_limit_error",
                                         code="rate_limit_exceeded").body(), status_code=429,
                                headers=headers | {"retry-after": "1"})
        self.in_flight += 1
        shadow = self._start_shadow(arm, p, request_id)
        if req.stream:
            include_usage = bool((req.stream_options or {}).get("include_usage"))
            return await self._stream(arm, p, req.model, request_id, started, headers, shadow, include_usage)
        try:
            result = await self._call(arm, p)
        except Exception as exc:
            self.in_flight -= 1
            status, body = _error_of(exc, arm)
            self._log(arm, p, request_id, status, None, type(exc).__name__, False, started)
            self._after_answer(arm, p, request_id, None, shadow)
            return JSONResponse(body, status_code=status, headers=headers)
        self.in_flight -= 1
        self._log(arm, p, request_id, 200, result, None, False, started)
        self._after_answer(arm, p, request_id, result["text"], shadow)
        body = completion_body(kind, req.model, result["text"], result["finish"], result["prompt_tokens"],
                               result["completion_tokens"])
        return JSONResponse(body, headers=headers)

    async def _stream(self, arm: str, p: Prompt, model: str, request_id: str, started: float,
                      headers: dict[str, str], shadow: asyncio.Task | None, include_usage: bool) -> Any:
        fault = self._fault(arm)
        gen = self.arms[arm].options(stream=True).stream.remote(p)
        try:  # the first item before the 200: an arm that fails at once gets a proper status
            if fault.get("latency_s"):
                await asyncio.sleep(fault["latency_s"])
            if fault.get("fail"):
                raise InjectedFault("injected fault (drill): this request fails on purpose")
            first = await gen.__anext__()
        except Exception as exc:
            self.in_flight -= 1
            status, body = _error_of(exc, arm)
            self._log(arm, p, request_id, status, None, type(exc).__name__, False, started)
            self._after_answer(arm, p, request_id, None, shadow)
            return JSONResponse(body, status_code=status, headers=headers)
        chunk_id = f"{'chatcmpl' if p.kind == 'chat' else 'cmpl'}-{request_id}"

        async def events():
            parts, item, error, done = [], first, None, None
            try:
                while True:
                    if "done" in item:
                        done = _with_fault(item["done"], fault | {"garble": False}, self.rng)
                        yield _sse(chunk_body(p.kind, model, chunk_id, None, done["finish"], False))
                        if include_usage:
                            yield _sse(usage_body(p.kind, model, chunk_id, done["prompt_tokens"],
                                                  done["completion_tokens"]))
                        break
                    delta = garble(item["delta"], self.rng) if fault.get("garble") else item["delta"]
                    parts.append(delta)
                    yield _sse(chunk_body(p.kind, model, chunk_id, delta, None, len(parts) == 1))
                    item = await gen.__anext__()
            except Exception as exc:  # after the 200: the error travels as an event, then [DONE]
                error = f"{type(exc).__name__}: {str(exc)[-300:]}"
                yield _sse(ApiError(500, f"the {arm} arm failed mid-stream", type="server_error").body())
            finally:
                self.in_flight -= 1
            yield "data: [DONE]\n\n"
            self._log(arm, p, request_id, 500 if error else 200, None if error else done, error, False,
                      started)
            self._after_answer(arm, p, request_id, None if error else "".join(parts), shadow)

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    @api.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Any:
        return await self._handle(request, "chat")

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Any:
        return await self._handle(request, "completion")

    @api.get("/v1/models")
    async def models(self, request: Request) -> Any:
        try:
            self._authorize(request)
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "quantgate"}
                                           for n in sorted(self.s["model_names"])]}

    @api.get("/quantgate/routing")
    async def routing(self) -> dict[str, Any]:
        return {"canary_weight": self.weight, "mirror_share": self.mirror_share,
                "shadow_share": self.shadow_share, "arms": sorted(self.arms),
                "mirrors_in_flight": len(self.background), "in_flight": self.in_flight,
                "faults": vars(self.faults), "max_queue": self.max_queue, "pid": os.getpid()}

