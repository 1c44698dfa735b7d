"""A fake of the TensorRT 10 Python API, just deep enough to be honest.

It keeps TensorRT's contract where the backend could get it wrong: the ONNX
file is parsed into network inputs with dynamic (-1) dims; building needs a
profile for every dynamic input; a plan deserializes only in the same
TensorRT version; input shapes outside the profile are refused; outputs whose
shape depends on the data (the encoder's ``z``) come back only through an
``IOutputAllocator``; everything moves through (fake) device memory.

The maths is real: an engine runs its ONNX half on ONNX Runtime, so the voice
sounds the same as on the CPU.  FP16 rounds outputs to float16; the knobs
``fp16_snr_db`` / ``fp32_snr_db`` add noise at that SNR to the decoder output
to drive the accuracy gate.  ``hang`` blocks ``execute_async_v3`` (a GPU stuck
mid-call) and ``in_execute`` tells a test that a call is on the device.

CUDA graphs: on a capturing stream ``execute_async_v3`` records its work (with
the shapes and addresses of that moment) instead of running it, and the
recording runs when the graph is launched.  As TensorRT requires, capture
fails (and invalidates the capture) when the context has not enqueued once
since its input shapes changed, or when an output goes through an
``IOutputAllocator`` (data-dependent shapes cannot be captured).
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from tests.fakes.cudart import FakeCudart, LaunchFailed

MAGIC = b"FAKETRT1"

_SESSIONS: dict[str, ort.InferenceSession] = {}
"""ONNX Runtime sessions by model digest, shared across fakes to keep tests fast."""
_SESSIONS_LOCK = threading.Lock()


def _session(model: bytes) -> ort.InferenceSession:
    digest = hashlib.sha256(model).hexdigest()
    with _SESSIONS_LOCK:
        if digest not in _SESSIONS:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            _SESSIONS[digest] = ort.InferenceSession(
                model, sess_options=opts, providers=["CPUExecutionProvider"]
            )
        return _SESSIONS[digest]


class DataType(enum.Enum):
    FLOAT = "float32"
    HALF = "float16"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"


_FROM_ONNX = {1: DataType.FLOAT, 10: DataType.HALF, 6: DataType.INT32, 7: DataType.INT64}


def nptype(dtype: DataType) -> type[Any]:
    return np.dtype(dtype.value).type


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class BuilderFlag(enum.Enum):
    FP16 = 0
    TF32 = 1


class Logger:
    ERROR = 1
    WARNING = 2
    INFO = 3

    def __init__(self, severity: int = WARNING) -> None:
        self.severity = severity
        self.errors: list[str] = []


class IOutputAllocator:
    def __init__(self) -> None:
        pass


class _Tensor:
    def __init__(self, name: str, shape: tuple[int, ...], dtype: DataType) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype


class _Network:
    def __init__(self) -> None:
        self.inputs: list[_Tensor] = []
        self.outputs: list[_Tensor] = []
        self.model: bytes = b""

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def get_input(self, i: int) -> _Tensor:
        return self.inputs[i]


def _tensors(values: Any) -> list[_Tensor]:
    out = []
    for v in values:
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim
        )
        out.append(_Tensor(v.name, dims, _FROM_ONNX[v.type.tensor_type.elem_type]))
    return out


class OnnxParser:
    def __init__(self, network: _Network, logger: Logger) -> None:
        self.network = network
        self.errors: list[str] = []

    def parse_from_file(self, path: str) -> bool:
        return self.parse(Path(path).read_bytes(), path)

    def parse(self, data: bytes, path: str | None = None) -> bool:
        try:
            model = onnx.load_from_string(data)
        except Exception as exc:  # the real parser reports, it does not raise
            self.errors.append(f"cannot parse {path}: {exc}")
            return False
        for value in model.graph.input:
            if not value.type.tensor_type.HasField("shape"):
                self.errors.append(f"{value.name}: input without a rank")  # as TensorRT
                return False
        initializers = {i.name for i in model.graph.initializer}
        self.network.inputs = _tensors(i for i in model.graph.input if i.name not in initializers)
        self.network.outputs = _tensors(model.graph.output)
        self.network.model = data
        return True

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, i: int) -> str:
        return self.errors[i]


class _Profile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}

    def set_shape(self, name: str, lo: Any, opt: Any, hi: Any) -> None:
        self.shapes[name] = (tuple(lo), tuple(opt), tuple(hi))


class _Config:
    def __init__(self) -> None:
        self.flags: set[BuilderFlag] = set()
        self.profiles: list[_Profile] = []

    def set_flag(self, flag: BuilderFlag) -> None:
        self.flags.add(flag)

    def add_optimization_profile(self, profile: _Profile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1


def _linear_rules(network: _Network, profile: _Profile) -> dict[str, list[list[float]]] | None:
    """Output dims as a*T + b of the first input's last dim, if the inputs are all float.

    That is how TensorRT resolves the decoder's output shape before running;
    the encoder's z (integer ids in) depends on the data and gets no rule.
    """
    if any(t.dtype != DataType.FLOAT for t in network.inputs):
        return None
    sess = _session(network.model)
    runs = []
    for which in (0, 2):
        feeds = {
            t.name: np.zeros(profile.shapes[t.name][which], dtype=np.float32)
            for t in network.inputs
        }
        runs.append((feeds[network.inputs[0].name].shape[-1], sess.run(None, feeds)))
    (t1, out1), (t2, out2) = runs
    rules = {}
    for i, tensor in enumerate(network.outputs):
        rule = []
        for d1, d2 in zip(out1[i].shape, out2[i].shape, strict=True):
            a = (d2 - d1) / (t2 - t1) if t2 != t1 else 0.0
            rule.append([a, d1 - a * t1])
        rules[tensor.name] = rule
    return rules


def _output_ranks(network: _Network, shapes: dict[str, Any]) -> dict[str, int]:
    """Output ranks from one run at the profile's opt shapes (inputs of ones)."""
    feeds = {t.name: np.ones(shapes[t.name][1], dtype=nptype(t.dtype)) for t in network.inputs}
    outs = _session(network.model).run(None, feeds)
    return {t.name: o.ndim for t, o in zip(network.outputs, outs, strict=True)}


class _Builder:
    def __init__(self, fake: FakeTensorRT, logger: Logger) -> None:
        self.fake = fake

    def create_network(self, flags: int = 0) -> _Network:
        return _Network()

    def create_builder_config(self) -> _Config:
        return _Config()

    def create_optimization_profile(self) -> _Profile:
        return _Profile()

    def build_serialized_network(self, network: _Network, config: _Config) -> bytes | None:
        self.fake.builds.append(sorted(t.name for t in network.inputs))
        if self.fake.fail_build or len(config.profiles) != 1:
            return None
        profile = config.profiles[0]
        for t in network.inputs:
            if any(d < 0 for d in t.shape) and t.name not in profile.shapes:
                return None  # TensorRT: dynamic input without an optimisation profile
        shapes = {
            t.name: profile.shapes.get(t.name, (t.shape, t.shape, t.shape)) for t in network.inputs
        }
        rules = _linear_rules(network, profile)
        if rules is None:  # data-dependent outputs: TensorRT reports -1 until it has run
            ranks = _output_ranks(network, shapes)
            outputs = [[t.name, t.dtype.name, [-1] * ranks[t.name]] for t in network.outputs]
        else:
            outputs = [[t.name, t.dtype.name, list(t.shape)] for t in network.outputs]
        header = {
            "version": self.fake.__version__,
            "fp16": BuilderFlag.FP16 in config.flags,
            "inputs": [[t.name, t.dtype.name] for t in network.inputs],
            "outputs": outputs,
            "profile": {k: [list(s) for s in v] for k, v in shapes.items()},
            "rules": rules,
        }
        blob = json.dumps(header).encode()
        return MAGIC + struct.pack("<I", len(blob)) + blob + network.model


class _Engine:
    def __init__(self, fake: FakeTensorRT, header: dict[str, Any], model: bytes) -> None:
        self.fake = fake
        self.header = header
        self.model = model
        self.inputs = {n: DataType[d] for n, d in header["inputs"]}
        self.outputs = {n: DataType[d] for n, d, _ in header["outputs"]}
        self.names = [*self.inputs, *self.outputs]

    @property
    def num_io_tensors(self) -> int:
        return len(self.names)

    def get_tensor_name(self, i: int) -> str:
        return self.names[i]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name in self.inputs else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return self.inputs.get(name) or self.outputs[name]

    def create_execution_context(self) -> _Context:
        return _Context(self)


class _Context:
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, Any] = {}
        self.shapes_changed = False
        """Set by a new input shape, cleared by an enqueue (TensorRT's deferred shape work)."""

    def set_input_shape(self, name: str, shape: Any) -> bool:
        lo, _, hi = self.engine.header["profile"][name]
        shape = tuple(int(d) for d in shape)
        if len(shape) != len(lo) or any(
            not a <= d <= b for d, a, b in zip(shape, lo, hi, strict=True)
        ):
            return False
        if self.shapes.get(name) != shape:
            self.shapes_changed = True
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if name in self.engine.inputs:
            return self.shapes.get(name) or tuple(self.engine.header["profile"][name][0])
        rules = self.engine.header["rules"]
        if rules is None:
            return next(tuple(s) for n, _, s in self.engine.header["outputs"] if n == name)
        return self._output_shape(name, self.shapes)

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.addresses[name] = int(ptr)
        return True

    def set_output_allocator(self, name: str, allocator: Any) -> bool:
        self.allocators[name] = allocator
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        fake = self.engine.fake
        cuda = fake.cuda
        if cuda.capturing(stream_handle):
            if self.shapes_changed or self.allocators:
                # TensorRT cannot capture deferred shape work or data-dependent outputs.
                cuda.invalidate(stream_handle)
                return False
            shapes, addresses = dict(self.shapes), dict(self.addresses)

            def replay() -> None:
                if not self._compute(shapes, addresses, stream_handle):
                    raise LaunchFailed  # the kernels failed on the device

            cuda.record(stream_handle, replay)
            return True
        ok = self._compute(self.shapes, self.addresses, stream_handle)
        self.shapes_changed = False
        return ok

    def _compute(
        self, shapes: dict[str, tuple[int, ...]], addresses: dict[str, int], stream_handle: int
    ) -> bool:
        """The engine's work on the (fake) device: read inputs, run, write outputs."""
        fake = self.engine.fake
        fake.executes += 1
        fake.in_execute.set()
        if fake.hang is not None:
            fake.hang.wait(30)
        if fake.cuda.lost or fake.fail_execute:
            return False
        cuda = fake.cuda
        feeds = {}
        for name, dtype in self.engine.inputs.items():
            shape = shapes[name]
            feeds[name] = cuda.device_array(addresses[name], shape, nptype(dtype)).copy()
        outs = _session(self.engine.model).run(list(self.engine.outputs), feeds)
        is_decoder = self.engine.header["rules"] is not None
        for (name, dtype), value in zip(self.engine.outputs.items(), outs, strict=True):
            value = np.ascontiguousarray(value, dtype=nptype(dtype))
            if dtype == DataType.FLOAT:
                value = fake.distort(value, self.engine.header["fp16"], is_decoder)
            if name in self.allocators:
                alloc = self.allocators[name]
                ptr = alloc.reallocate_output_async(name, 0, value.nbytes, 256, stream_handle)
                alloc.notify_shape(name, value.shape)
            else:
                ptr = addresses[name]
                assert tuple(value.shape) == self._output_shape(name, shapes), "static shape rule"
            cuda.device_array(ptr, value.shape, value.dtype)[...] = value
        return True

    def _output_shape(self, name: str, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
        first = self.engine.header["inputs"][0][0]
        t = shapes[first][-1]
        return tuple(round(a * t + b) for a, b in self.engine.header["rules"][name])


class _Runtime:
    def __init__(self, fake: FakeTensorRT, logger: Logger) -> None:
        self.fake = fake
        self.logger = logger

    def deserialize_cuda_engine(self, plan: bytes) -> _Engine | None:
        if not plan.startswith(MAGIC) or len(plan) < len(MAGIC) + 4:
            self.logger.errors.append("not an engine plan")
            return None
        (size,) = struct.unpack_from("<I", plan, len(MAGIC))
        start = len(MAGIC) + 4
        try:
            header = json.loads(plan[start : start + size])
        except ValueError:
            self.logger.errors.append("corrupt engine plan")
            return None
        if header.get("version") != self.fake.__version__:
            self.logger.errors.append("plan built by another TensorRT version")
            return None
        return _Engine(self.fake, header, plan[start + size :])


class FakeTensorRT:
    """Stands in for ``import tensorrt``; ``cuda`` is the fake CUDA it runs on."""

    DataType = DataType
    TensorIOMode = TensorIOMode
    BuilderFlag = BuilderFlag
    Logger = Logger
    IOutputAllocator = IOutputAllocator
    OnnxParser = OnnxParser

    def __init__(self, cuda: FakeCudart, version: str = "10.3.0") -> None:
        self.__version__ = version
        self.cuda = cuda
        self.builds: list[list[str]] = []
        self.executes = 0
        self.fail_build = False
        self.fail_execute = False
        self.fp16_snr_db: float | None = None
        self.fp32_snr_db: float | None = None
        self.hang: threading.Event | None = None
        self.in_execute = threading.Event()
        self._rng = np.random.default_rng(0)

    @staticmethod
    def nptype(dtype: DataType) -> type[Any]:
        return nptype(dtype)

    def Builder(self, logger: Logger) -> _Builder:
        return _Builder(self, logger)

    def Runtime(self, logger: Logger) -> _Runtime:
        return _Runtime(self, logger)

    def distort(self, value: np.ndarray[Any, Any], fp16: bool, is_decoder: bool) -> Any:
        if fp16:
            value = value.astype(np.float16).astype(np.float32)
        snr = self.fp16_snr_db if fp16 else self.fp32_snr_db
        if snr is not None and is_decoder:
            rms = float(np.sqrt(np.mean(value.astype(np.float64) ** 2))) or 1.0
            noise = self._rng.standard_normal(value.shape) * rms * 10 ** (-snr / 20)
            value = (value + noise).astype(np.float32)
        return value
