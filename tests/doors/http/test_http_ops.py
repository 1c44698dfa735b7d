"""Operations over HTTP: /metrics (one registry with ``stats``), /healthz, disconnects."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.clients.client import Client
from appliance.ops.config import SchedulerConfig
from tests.conftest import ROOMY_ADMISSION, DaemonFactory
from tests.doors.http.conftest import HttpDaemon, free_port, start_http, wait_http

LONG = (
    "The morning train was late again, so Anna walked along the river instead. "
    "The water was high after the rain, and the ducks had claimed the footpath. "
    "At the top of the hill there is a small stone chapel. "
    "Nobody knows who built it, but every spring someone paints the door blue. "
) * 4


def scrape(d: HttpDaemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async def go() -> str:
        async with aiohttp.ClientSession() as s, s.get(d.base + "/metrics") as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain")
            return await r.text()

    samples = {}
    for family in text_string_to_metric_families(asyncio.run(go())):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    want = set(labels.items())
    return sum(v for (n, lb), v in samples.items() if n == name and want <= set(lb))


def speak(d: HttpDaemon, text: str = "Hello there.") -> int:
    async def go() -> int:
        async with (
            aiohttp.ClientSession() as s,
            s.post(d.v1 + "/audio/speech", json={"input": text, "response_format": "pcm"}) as r,
        ):
            assert r.status == 200
            return len(await r.read())

    return asyncio.run(go())


def test_metrics_parse_move_and_match_stats(http_daemon: HttpDaemon) -> None:
    before = scrape(http_daemon)
    n = speak(http_daemon)
    after = scrape(http_daemon)
    done = {"frontend": "http", "result": "completed"}
    assert (
        total(after, "ttsd_requests_total", **done)
        == total(before, "ttsd_requests_total", **done) + 1
    )
    audio = total(after, "ttsd_audio_seconds_total") - total(before, "ttsd_audio_seconds_total")
    assert abs(audio - n / 2 / 22050) < 0.05
    assert total(after, "ttsd_ttfp_seconds_count") == total(before, "ttsd_ttfp_seconds_count") + 1
    assert total(after, "ttsd_ttfp_part_seconds_count", part="encode") >= 1
    for name in ("ttsd_queue_depth", "ttsd_uptime_seconds", "ttsd_serving", "ttsd_stalls_total"):
        assert (name, ()) in after, name
    assert total(after, "ttsd_backend_info", backend="onnx-cpu") == 1
    assert total(after, "ttsd_health", status="ok") == 1
    assert total(after, "ttsd_connections", frontend="http") >= 1
    # What start-up made is frozen (appliance.ops.memory.freeze); collections are counted.
    assert after[("ttsd_gc_frozen_objects", ())] > 10_000
    assert total(after, "ttsd_gc_collections_total") >= 1
    assert total(after, "ttsd_gc_pause_seconds_total") > 0
    # protocol v1's stats reads the same registry: the same numbers.
    with Client(http_daemon.daemon.socket) as c:
        st = c.stats()
    again = scrape(http_daemon)
    counters = st["counters"]
    assert counters["requests_completed"] == total(again, "ttsd_requests_total", result="completed")
    assert counters["requests_cancelled"] == total(again, "ttsd_requests_total", result="cancelled")
    assert st["requests_by_frontend"]["http"] == total(
        again, "ttsd_requests_total", frontend="http"
    )
    assert counters["chunks"] == total(again, "ttsd_chunks_total")
    assert st["ttfp_ms"]["count"] == total(again, "ttsd_ttfp_seconds_count")
    for code, count in st["errors"].items():
        assert count == total(again, "ttsd_errors_total", code=code), code
    assert st["frontends"]["http"]["connections"] >= 0
    # The run-queue wait: once the workers have run for a while, a share, on both sides.
    wait = st["scheduler"]["cpu_wait"]
    assert wait is None or 0.0 <= wait <= 1.0
    assert (wait is None) == (("ttsd_cpu_wait_ratio", ()) not in again)
    # Admission's limit: the configured one, shrunk only by a wait past admission_cpu_wait.
    limit, full = st["admission"]["limit"], ROOMY_ADMISSION["admission_max_load"]
    assert 0.0 <= limit <= full
    assert limit == full or wait >= SchedulerConfig().admission_cpu_wait  # wait is rounded
    assert 0.0 <= again[("ttsd_admission_load_limit", ())] <= full


def test_the_model_runs_of_a_request_by_part(http_daemon: HttpDaemon) -> None:
    with Client(http_daemon.daemon.socket) as c:
        before = c.stats()["model_runs"]
    samples = speak(http_daemon, "Turn left in two hundred metres, then keep going.") // 2
    with Client(http_daemon.daemon.socket) as c:
        after = c.stats()["model_runs"]
    scraped = scrape(http_daemon)

    def moved(part: str, key: str) -> float:
        return float(after.get(part, {}).get(key, 0) - before.get(part, {}).get(key, 0))

    # One sentence: its prior covers every frame heard, the flow fills each once, and
    # each is decoded once (an urgent first window, then windows ahead of need).
    frames = samples / 256
    assert moved("prior", "frames") == frames
    assert moved("flow", "frames") == frames
    assert moved("decoder", "frames") + moved("decoder_urgent", "frames") == frames
    assert moved("prior", "runs") == 1
    for part in ("prior", "flow", "decoder"):
        assert moved(part, "cpu_s") > 0 and moved(part, "wall_s") > 0, part
    # /metrics reads the same counters (nothing ran between the two reads).
    for part, cost in after.items():
        assert total(scraped, "ttsd_model_runs_total", part=part) == cost["runs"], part
        assert total(scraped, "ttsd_model_frames_total", part=part) == cost["frames"], part
        scraped_cpu = total(scraped, "ttsd_model_cpu_seconds_total", part=part)
        assert scraped_cpu == pytest.approx(cost["cpu_s"], abs=0.002), part


@pytest.mark.parametrize("fmt", ["wav", "opus"])
def test_disconnect_mid_stream_frees_the_queue_at_once(http_daemon: HttpDaemon, fmt: str) -> None:
    before = scrape(http_daemon)

    async def go() -> tuple[int, float]:
        async with aiohttp.ClientSession() as s:
            r = await s.post(
                http_daemon.v1 + "/audio/speech", json={"input": LONG, "response_format": fmt}
            )
            first = await r.content.readany()
            r.close()  # drops the connection mid-stream
            return len(first), time.monotonic()

    got, t_closed = asyncio.run(go())
    assert got > 0
    deadline = t_closed + 10.0
    while True:
        now = scrape(http_daemon)
        cancelled = total(now, "ttsd_requests_total", frontend="http", result="cancelled")
        if (
            cancelled
            == total(before, "ttsd_requests_total", frontend="http", result="cancelled") + 1
            and total(now, "ttsd_streams", frontend="http") == 0
            and total(now, "ttsd_queue_depth") == 0
        ):
            break
        assert time.monotonic() < deadline, "the stream was not freed"
        time.sleep(0.05)
    freed_after = time.monotonic() - t_closed
    made = total(now, "ttsd_audio_seconds_total") - total(before, "ttsd_audio_seconds_total")
    print(f"disconnect: freed after {freed_after * 1000:.0f} ms, {made:.1f} s of audio made")
    # LONG is about 50 s of audio: the work stopped long before it was all made.
    assert made < 25.0
    assert total(now, "ttsd_errors_total") == total(
        before, "ttsd_errors_total"
    )  # a cancel, not an error


def test_healthz_ok_and_playback_in_its_own_field(http_daemon: HttpDaemon) -> None:
    async def go() -> tuple[int, dict[str, object]]:
        async with aiohttp.ClientSession() as s, s.get(http_daemon.base + "/healthz") as r:
            return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 200 and body["status"] == "ok" and body["serving"] is True
    assert body["playback"] == {"state": "off"}


def test_a_box_without_a_speaker_is_healthy(daemon_factory: DaemonFactory) -> None:
    """Playback on, but no such device: speech is served, so the box is ``ok``."""
    d = start_http(daemon_factory, playback={"enabled": True, "device": "no-such-device-xyz"})

    async def go() -> tuple[int, dict[str, object]]:
        async with aiohttp.ClientSession() as s, s.get(d.base + "/healthz") as r:
            return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 200 and body["status"] == "ok", body
    playback = body["playback"]
    assert isinstance(playback, dict) and playback["state"] == "off", playback
    assert speak(d) > 10000
    d.daemon.stop()


def test_healthz_is_503_when_no_worker_can_serve(daemon_factory: DaemonFactory) -> None:
    """The only inference worker hangs (test hook): health goes ``failing``, /healthz 503."""
    port = free_port()
    daemon = daemon_factory(
        {"http": {"listen": f"127.0.0.1:{port}"}, "engine": {"workers": 1}},
        seams=["--stall-first-item", "25"],
    )
    d = HttpDaemon(daemon, f"http://127.0.0.1:{port}")
    wait_http(d.base, daemon)

    async def go() -> list[tuple[int, str]]:
        seen: list[tuple[int, str]] = []
        async with aiohttp.ClientSession() as s:
            stuck = asyncio.create_task(
                s.post(d.v1 + "/audio/speech", json={"input": "Hello.", "response_format": "pcm"})
            )
            deadline = time.monotonic() + 20.0
            while time.monotonic() < deadline:
                async with s.get(d.base + "/healthz") as r:
                    seen.append((r.status, (await r.json())["status"]))
                if seen[-1][0] == 503:
                    break
                await asyncio.sleep(0.5)
            stuck.cancel()
        return seen

    seen = asyncio.run(go())
    assert seen[0] == (200, "ok") and seen[-1] == (503, "failing"), seen
    daemon.stop(signal.SIGKILL)
