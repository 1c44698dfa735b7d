"""Engine cache: verified plans, loud mismatches, one builder at a time."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from appliance.model.engine.engine_cache import EngineCache, EngineKey


def key(**changes: object) -> EngineKey:
    fields: dict[str, object] = {
        "voice": "en_US-joe-medium",
        "part": "encoder",
        "model_sha256": "ab" * 32,
        "tensorrt": "10.3.0",
        "gpu_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "precision": "fp16",
        "profile": (1, 64, 400),
    }
    fields.update(changes)
    return EngineKey(**fields)  # type: ignore[arg-type]


def test_miss_then_hit(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    assert cache.lookup(key()).status == "miss"
    cache.store(key(), b"plan-bytes", {"snr_db": 61.0})
    found = cache.lookup(key())
    assert found.status == "hit"
    assert found.plan == b"plan-bytes"
    assert found.meta["snr_db"] == 61.0
    assert json.loads(cache.sidecar_path(key()).read_text())["key"]["tensorrt"] == "10.3.0"


def test_mismatched_tensorrt_version_says_what_differs(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.store(key(tensorrt="8.6.1"), b"old")
    found = EngineCache(tmp_path).lookup(key(tensorrt="8.6.2"))
    assert found.status == "mismatch"
    assert found.plan is None
    assert "tensorrt: cached '8.6.1', running '8.6.2'" in found.reason


def test_model_change_is_a_mismatch(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.store(key(), b"plan")
    assert cache.lookup(key(model_sha256="cd" * 32)).status == "mismatch"


def test_gpu_and_precision_get_their_own_files(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    assert cache.plan_path(key()) != cache.plan_path(key(precision="fp32"))
    assert cache.plan_path(key()) != cache.plan_path(
        key(gpu_name="NVIDIA L4", compute_capability="8.9")
    )


def test_corrupt_plan_and_sidecar(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.store(key(), b"plan-bytes")
    cache.plan_path(key()).write_bytes(b"plan-bytez")
    found = cache.lookup(key())
    assert found.status == "corrupt"
    assert "checksum" in found.reason
    cache.sidecar_path(key()).write_text("{not json")
    assert cache.lookup(key()).status == "corrupt"


def test_rejected_marker(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.store(key(), b"plan")
    cache.reject(key(), "SNR 12.0 dB")
    found = cache.lookup(key())
    assert found.status == "rejected"
    assert found.reason == "SNR 12.0 dB"
    assert not cache.plan_path(key()).exists()


def test_build_lock_keeps_a_second_builder_waiting(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    order: list[str] = []
    holding = threading.Event()

    def second() -> None:
        holding.wait(5)
        with EngineCache(tmp_path).build_lock():
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    with cache.build_lock():
        holding.set()
        time.sleep(0.2)  # the second builder is blocked in flock meanwhile
        order.append("first")
    thread.join(5)
    assert order == ["first", "second"]
