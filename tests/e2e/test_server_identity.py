"""What a server says it is: one node id on its spans, its metrics (OTLP and Prometheus's
`target_info`) and every line of its log, and the version of behest its contract documents.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import urllib.request
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

import behest
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.otlp_receiver import OtlpReceiver, attributes
from tests.support import collect, create_request, kind, server_process

PROTO = Path(__file__).parents[2] / "proto"
ADDED_IN = re.compile(r"Added in behest (\d+(?:\.\d+)+)")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def target_info(port: int) -> dict[str, str]:
    """The labels of the `target_info` sample on the server's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "target_info":
                return dict(sample.labels)
    raise AssertionError(f"no target_info in /metrics:\n{text[:2000]}")


async def test_spans_metrics_and_log_lines_name_the_same_node(tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    endpoint = await receiver.start_grpc()
    serving: dict[str, object] = {}
    lines: list[str] = []
    exporting = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "BEHEST_METRICS_LISTEN": "127.0.0.1:0",
    }
    try:
        async with server_process(tmp_path, serving, lines=lines, **exporting) as (process, at):
            async with grpc.aio.insecure_channel(at) as channel:
                runs = rpc.RunServiceStub(channel)
                events = await collect(runs.CreateRunStream(create_request("who is there?")))
            scraped = await asyncio.to_thread(target_info, int(str(serving["metrics_port"])))
            process.send_signal(signal.SIGTERM)  # the last spans and metrics go at the stop
            async with asyncio.timeout(30):
                await process.wait()
    finally:
        await receiver.stop()
    assert kind(events[-1]) == "run_completed"
    node = serving["node"]
    assert isinstance(node, str) and node
    spans = receiver.resource_attributes()
    metrics = attributes(receiver.metrics[-1].resource_metrics[0].resource)
    for resource in (spans, metrics):
        assert resource["service.instance.id"] == node
        assert resource["service.version"] == behest.__version__
        assert resource["service.name"] == "behest"
    assert scraped["service_instance_id"] == node
    assert scraped["service_version"] == behest.__version__
    entries = [json.loads(line) for line in lines]
    assert [e["msg"] for e in entries if e["msg"] in ("behest serving", "behest stopped")] == [
        "behest serving",
        "behest stopped",
    ]
    assert {e.get("node") for e in entries} == {node}


def test_the_version_is_at_least_every_version_the_contract_names() -> None:
    named = {
        match
        for path in PROTO.rglob("*.proto")
        for match in ADDED_IN.findall(path.read_text(encoding="utf-8"))
    }
    assert named, "the protos name no version (Added in behest X)"
    newest = max(named, key=_version)
    assert _version(behest.__version__) >= _version(newest), (
        f"behest {behest.__version__}, but the contract documents behest {newest}"
    )
