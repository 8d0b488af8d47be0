"""``/metrics`` in Prometheus' text format: the engine's state read at each scrape, and
per-request latencies observed as requests finish. Names follow vLLM's (``vllm:`` becomes
``dsrt:``) so dashboards built for it read these."""
from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0, 20.0, 40.0, 80.0)
_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


class _EngineCollector:
    """Reads the engine's counters when Prometheus scrapes, so they are never stale."""

    def __init__(self, stats: Callable[[], dict], in_flight: Callable[[], int]):
        self._stats = stats
        self._in_flight = in_flight

    def collect(self):
        s = self._stats()
        yield GaugeMetricFamily("dsrt:num_requests_running",
                                "Requests holding KV blocks in the engine", value=s["running"])
        yield GaugeMetricFamily("dsrt:num_requests_waiting",
                                "Requests queued for their first KV blocks", value=s["waiting"])
        yield GaugeMetricFamily("dsrt:http_requests_in_flight",
                                "HTTP generation requests being served", value=self._in_flight())
        yield GaugeMetricFamily("dsrt:kv_blocks_used", "KV cache blocks held by requests",
                                value=s["used_blocks"])
        yield GaugeMetricFamily("dsrt:kv_blocks_total", "KV cache blocks in the pool",
                                value=s["total_blocks"])
        yield GaugeMetricFamily("dsrt:kv_cache_usage_perc", "Fraction of KV blocks held",
                                value=s["used_blocks"] / max(1, s["total_blocks"]))
        yield CounterMetricFamily("dsrt:prefix_cache_hits",
                                  "Prompt blocks found in the prefix cache",
                                  value=s["prefix_hits"])
        yield CounterMetricFamily("dsrt:prefix_cache_queries",
                                  "Prompt blocks looked up in the prefix cache",
                                  value=s["prefix_hits"] + s["prefix_misses"])
        yield CounterMetricFamily("dsrt:num_preemptions", "Requests preempted for KV blocks",
                                  value=s["preemptions"])
        yield CounterMetricFamily("dsrt:engine_steps", "Engine iterations", value=s["steps"])
        yield CounterMetricFamily("dsrt:spec_decode_num_draft_tokens",
                                  "Draft tokens proposed by prompt lookup",
                                  value=s["draft_tokens"])
        yield CounterMetricFamily("dsrt:spec_decode_num_accepted_tokens",
                                  "Draft tokens the model confirmed",
                                  value=s["accepted_draft_tokens"])


class ServerMetrics:
    """The server's registry: engine gauges plus request histograms and token counters."""

    def __init__(self, stats: Callable[[], dict], in_flight: Callable[[], int]):
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(stats, in_flight))
        self.ttft = Histogram("dsrt:time_to_first_token_seconds",
                              "Time from a request's arrival to its first token",
                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.tpot = Histogram("dsrt:time_per_output_token_seconds",
                              "Mean time between a request's tokens after its first",
                              buckets=_TOKEN_BUCKETS, registry=self.registry)
        self.e2e = Histogram("dsrt:e2e_request_latency_seconds",
                             "Time from a request's arrival to its last token",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.prompt_tokens = Counter("dsrt:prompt_tokens", "Prompt tokens of served requests",
                                     registry=self.registry)
        self.generation_tokens = Counter("dsrt:generation_tokens", "Tokens generated",
                                         registry=self.registry)
        self.finished = Counter("dsrt:request_success", "Requests finished, by reason",
                                ["finished_reason"], registry=self.registry)
        self.rejected = Counter("dsrt:request_rejected", "Requests refused, by HTTP status",
                                ["status"], registry=self.registry)

    def observe(self, prompt_tokens: int, generated: int, ttft: float, e2e: float,
                reason: str) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(generated)
        if generated:
            self.ttft.observe(ttft)
            if generated > 1:
                self.tpot.observe((e2e - ttft) / (generated - 1))
        self.e2e.observe(e2e)
        self.finished.labels(finished_reason=reason).inc()
