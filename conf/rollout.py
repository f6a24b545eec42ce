"""The canary's typed config: the serving layer, the weight steps, and the analysis after each step
(Argo Rollouts' vocabulary: success and failure conditions, `failure_limit`, `inconclusive_limit`,
`consecutive_error_limit`, docs/canary.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from quantgate.conf.base import Strict


class ServingConf(Strict):
    """The Ray Serve application: OpenAI-compatible API on loopback, `champion` and `canary`."""

    host: str = Field(default="127.0.0.1", description="loopback only: 127.0.0.1, ::1 or localhost")
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    replica_cpus: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.5, description="Ray CPUs per arm in Ray's accounting; each arm's engine server runs on "
        "`engine.threads` cores of its own (`engine` configures both arms' engines)")
    replica_gpus: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="GPUs per arm (cluster: 1, each arm's engine on a GPU of its own)")
    max_queue: Annotated[int, Field(ge=1)] = Field(
        default=64, description="requests in flight at the router; past it a request gets 429 with "
        "Retry-After instead of waiting in an unbounded queue")
    api_key_env: str | None = Field(default="QG_SERVE_API_KEY", description="when this variable is set, "
                                    "requests need `Authorization: Bearer <its value>`")
    default_max_tokens: Annotated[int, Field(ge=1)] = 64
    max_tokens: Annotated[int, Field(ge=1)] = 512
    max_prompt_chars: Annotated[int, Field(ge=1)] = 16_000

    @field_validator("host")
    @classmethod
    def _loopback(cls, v: str) -> str:
        if v not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(f"{v!r}: the serving layer binds loopback only")
        return v


class AnalysisConf(Strict):
    alpha: Annotated[float, Field(gt=0, lt=0.5)] = Field(
        default=0.05, description="false-alarm rate of the whole rollout, per metric (e-values read at "
        "every window; rank tests at a fixed α/len(steps) per step)")
    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.05
    min_error_samples: Annotated[int, Field(ge=1)] = Field(
        default=20, description="canary requests before an error rate above max_error_rate alone fails")
    latency_tolerance: Annotated[float, Field(ge=1)] = Field(
        default=1.25, description="service time: fail when the canary's is significantly above this "
        "multiple of the champion's (one-sided Mann-Whitney)")
    tpot_tolerance: Annotated[float, Field(ge=1)] = 1.25
    energy_tolerance: Annotated[float, Field(ge=1)] = Field(
        default=1.25, description="estimated J/token: fail when the canary's is significantly above this "
        "multiple of the champion's")
    min_latency_samples: Annotated[int, Field(ge=2)] = 4
    judge: Literal["auto", "on", "off"] = Field(
        default="auto", description="judge canary vs champion on mirrored prompts; auto: on when the "
        "pipeline's judge is enabled; always on for a `monitor` variant")
    judge_mode: Literal["likelihood", "text", "prob", "rubric", "reference"] = Field(
        default="likelihood", description="likelihood: the champion's model scores both answers of each "
        "pair (mean NLL per token; GPTScore, arXiv 2302.04166), no judge server needed; the others: the "
        "pipeline's LLM judge (judge.*) in that mode. The packaged 1.5B judge cannot tell random tokens "
        "from an answer on short replies (README \"The canary\"): use an LLM mode with a strong "
        "judge.base_url")
    likelihood_tie_band: Annotated[float, Field(gt=0)] = Field(
        default=1.0, description="nats per token: the canary's answer loses a pair when the champion "
        "finds it this much less likely than its own answer, wins when this much more likely")
    judge_min_pairs: Annotated[int, Field(ge=1)] = 6
    judge_max_loss_share: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.2, description="fail when the canary loses more than this share of mirrored pairs")
    judge_max_pairs_per_step: Annotated[int, Field(ge=1)] = 8


class RolloutConf(Strict):
    auto: bool = Field(default=False, description="quantize_and_gate ends by rolling out its winner "
                       "(conf/default.yaml: on)")
    steps: tuple[Annotated[float, Field(gt=0, le=100)], ...] = Field(
        default=(5, 25, 50, 100), min_length=1, description="canary weight per step, percent")
    window_canary_requests: Annotated[int, Field(ge=1)] = Field(
        default=8, description="canary answers per window, routed and shadowed: the replayer sends "
        "this many divided by (weight + (1 - weight) x shadow_share), bounded by window_max_requests")
    window_max_requests: Annotated[int, Field(ge=1)] = 120
    window_max_s: Annotated[float, Field(gt=0)] = 120
    replay_concurrency: Annotated[int, Field(ge=1)] = 2
    replay_rate_per_s: Annotated[float, Field(ge=0)] = Field(default=0, description="0: closed loop")
    replay_max_tokens: Annotated[int, Field(ge=1)] = 24
    mirror_share: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0, description="share of canary requests also sent to the champion (judge pairs; "
        "costs the canary's share of traffic again)")
    shadow_share: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0, description="share of requests routed to the champion also sent to the canary at the "
        "same time, its answer kept for the analysis only (Argo Rollouts' setMirrorRoute): a low-weight "
        "step gets a testable sample without exposing more users")
    failure_limit: Annotated[int, Field(ge=0)] = 0
    inconclusive_limit: Annotated[int, Field(ge=0)] = Field(
        default=2, description="inconclusive windows repeated at the same weight before pausing (three "
        "windows of 8 give the error-rate threshold its min_error_samples)")
    consecutive_error_limit: Annotated[int, Field(ge=0)] = 4
    pause_timeout_s: Annotated[float, Field(gt=0)] = 3600
    on_pause_timeout: Literal["rollback", "promote", "leave_paused"] = Field(
        default="rollback", description="no answer within pause_timeout_s; leave_paused: the run ends paused "
        "(exit 4) and `quantgate promote|rollback|rollout` decide later")
    on_resume: Literal["resume", "rollback"] = Field(
        default="resume", description="a rollout found unfinished (its process died): resume from its "
        "last recorded step, or roll it back")
    serving: ServingConf = ServingConf()
    analysis: AnalysisConf = AnalysisConf()

    @field_validator("steps")
    @classmethod
    def _increasing(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if list(v) != sorted(set(v)):
            raise ValueError(f"{list(v)}: steps must increase strictly")
        return v
