"""The TensorRT backend: engines built from the two ONNX halves of a voice.

* The encoder engine has one optimisation profile over the phoneme count
  (min 1, opt 64, max ``engine.max_phonemes``).  Its latent ``z`` has a
  data-dependent length (the sum of the durations), so it comes back through an
  ``IOutputAllocator``.
* The decoder engine covers a narrow frame range (``gpu.decoder_frames``:
  min / opt / max), with ``opt`` the common streaming window so that TensorRT
  tunes, and a CUDA graph can replay, exactly that shape.  Shorter windows are
  zero-padded to ``min`` and trimmed; longer ones are decoded in pieces with
  16 frames of context on each side, which is exact for HiFi-GAN.
* Decoder windows of a shape seen before replay a CUDA graph (one per exact
  shape, at most :data:`MAX_GRAPHS`): one launch instead of a copy, an enqueue
  and a copy back, each with its own launch overhead.

Everything reaches TensorRT and CUDA through :class:`~appliance.model.engine.trt_seam.TrtRuntime`
(TensorRT 10 name-based tensors: ``set_input_shape``, ``set_tensor_address``,
``execute_async_v3``; CUDA streams and memory from cuda-python), so contract
tests drive this module with fakes.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.model.engine.base import BackendError, Encoded, Scales, VoiceModel, Window
from appliance.model.engine.pool import UnsupportedInput
from appliance.model.engine.trt_seam import TrtRuntime
from appliance.ops.meter import RunMeter
from appliance.speech import FloatArray, IntArray

log = logging.getLogger(__name__)

CONTEXT_FRAMES = 16
"""Context each side of a decoder piece; 16 frames make windowed HiFi-GAN exact."""
ENCODER_OPT_PHONEMES = 64

MAX_GRAPHS = 8
"""CUDA graphs kept per engine (least recently used goes first); each holds its own
execution context and buffers, a few MB of device memory for the decoder."""
GRAPH_AFTER_USES = 2
"""A shape is captured on its second use, so one-off windows (a clause's last) take no slot."""
_SHAPES_REMEMBERED = 256
_MAX_CAPTURE_FAILURES = 3
"""Failed captures (other than data-dependent shapes) after which an engine stops trying."""
_NO_GRAPH = -1

ShapeKey = tuple[tuple[int, ...], ...]


class EngineBuildError(RuntimeError):
    """TensorRT could not build an engine (parser or builder failure)."""


class EngineLoadError(RuntimeError):
    """A serialized engine could not be deserialized (corrupt, or built by another TensorRT)."""


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    compute_capability: str
    """``"major.minor"``, e.g. ``"9.0"`` for an H100/H200."""


class _Cuda:
    """Thin checks over cuda-python's ``(error, value...)`` tuples."""

    def __init__(self, cudart: Any) -> None:
        self.rt = cudart

    def call(self, what: str, result: Any) -> Any:
        if isinstance(result, tuple):
            err, rest = result[0], result[1:]
        else:
            err, rest = result, ()
        if err != self.rt.cudaError_t.cudaSuccess:
            raise BackendError(f"CUDA {what} failed: {err!r}")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def h2d(self, dst: int, host: np.ndarray[Any, Any], stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.call(
            "cudaMemcpyAsync(H2D)",
            self.rt.cudaMemcpyAsync(dst, host.ctypes.data, host.nbytes, kind, stream),
        )

    def d2h(self, host: np.ndarray[Any, Any], src: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.call(
            "cudaMemcpyAsync(D2H)",
            self.rt.cudaMemcpyAsync(host.ctypes.data, src, host.nbytes, kind, stream),
        )

    def sync(self, stream: Any) -> None:
        self.call("cudaStreamSynchronize", self.rt.cudaStreamSynchronize(stream))


def device_count(rt: TrtRuntime) -> int:
    """CUDA devices visible to this process (0 when the driver has none)."""
    err, count = rt.cudart.cudaGetDeviceCount()
    if err != rt.cudart.cudaError_t.cudaSuccess:
        return 0
    return int(count)


def device_info(rt: TrtRuntime, index: int) -> DeviceInfo:
    props = _Cuda(rt.cudart).call(
        "cudaGetDeviceProperties", rt.cudart.cudaGetDeviceProperties(index)
    )
    raw = props.name
    name = raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return DeviceInfo(name=name.strip(), compute_capability=f"{props.major}.{props.minor}")


# --------------------------------------------------------------------------- build


def _profile_shapes(
    shape: Sequence[int], lo: int, opt: int, hi: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Dynamic dims: the first (batch) is always 1, the others span [lo, hi]."""
    mins, opts, maxs = [], [], []
    for axis, dim in enumerate(shape):
        if dim >= 0:
            mins.append(dim)
            opts.append(dim)
            maxs.append(dim)
        elif axis == 0:
            mins.append(1)
            opts.append(1)
            maxs.append(1)
        else:
            mins.append(lo)
            opts.append(opt)
            maxs.append(hi)
    return tuple(mins), tuple(opts), tuple(maxs)


def _ranked_onnx(path: Path) -> bytes:
    """The ONNX model with a rank on every graph input, as TensorRT requires.

    A cut made with ``onnx.utils.Extractor`` can leave the decoder's input ``z``
    without a shape.  It feeds a Conv, so it is [batch, in_channels, frames] with
    ``in_channels`` read from the Conv's weight.
    """
    import onnx

    model = onnx.load(str(path))
    weights = {init.name: tuple(init.dims) for init in model.graph.initializer}
    for value in model.graph.input:
        if value.type.tensor_type.HasField("shape") or value.name in weights:
            continue
        for node in model.graph.node:
            if node.op_type == "Conv" and node.input[0] == value.name and node.input[1] in weights:
                dims = value.type.tensor_type.shape.dim
                dims.add().dim_param = "batch"
                dims.add().dim_value = int(weights[node.input[1]][1])
                dims.add().dim_param = "frames"
                break
        else:
            raise EngineBuildError(f"{path}: input {value.name} has no shape TensorRT can use")
    data: bytes = model.SerializeToString()
    return data


def build_engine(
    rt: TrtRuntime,
    onnx_path: str | Path,
    *,
    precision: str,
    dim_range: tuple[int, int, int],
) -> bytes:
    """Parse one ONNX half and build a serialized engine.

    ``dim_range`` (min, opt, max) is applied to every dynamic non-batch
    dimension of every input: the phoneme count for the encoder, the frame
    count for the decoder.
    """
    trt = rt.trt
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(_ranked_onnx(Path(onnx_path)), str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EngineBuildError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    lo, opt, hi = dim_range
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = tuple(int(d) for d in tensor.shape)
        if any(d < 0 for d in shape):
            profile.set_shape(tensor.name, *_profile_shapes(shape, lo, opt, hi))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"TensorRT failed to build an engine from {onnx_path}")
    return bytes(serialized)


# --------------------------------------------------------------------------- run


def _output_allocator_class(trt: Any, cuda: _Cuda) -> type[Any]:
    """An ``IOutputAllocator`` (grow-only) for outputs with data-dependent shapes."""

    class OutputAllocator(trt.IOutputAllocator):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)
            self.ptr = 0
            self.capacity = 0
            self.shape: tuple[int, ...] = ()

        def reallocate_output(
            self, tensor_name: str, memory: int, size: int, alignment: int
        ) -> int:
            if size <= self.capacity:
                return self.ptr
            if self.ptr:
                cuda.call("cudaFree", cuda.rt.cudaFree(self.ptr))
                self.ptr = self.capacity = 0
            self.ptr = int(cuda.call("cudaMalloc", cuda.rt.cudaMalloc(max(size, 1))))
            self.capacity = size
            return self.ptr

        def reallocate_output_async(
            self, tensor_name: str, memory: int, size: int, alignment: int, stream: Any
        ) -> int:
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            self.shape = tuple(int(d) for d in shape)

        def free(self) -> None:
            if self.ptr:
                cuda.rt.cudaFree(self.ptr)
                self.ptr = self.capacity = 0

    return OutputAllocator


class _GraphCaptureFailed(Exception):
    """No CUDA graph for this shape; the plain path serves it."""


class _Graph:
    """A CUDA graph for one exact set of input shapes, and everything it points at.

    A graph fixes the shapes, the tensor addresses and the execution context it
    was captured with, so it gets its own of each: a dedicated execution context
    (never re-shaped), dedicated device buffers (``run()`` may reallocate its
    own) and pinned host staging arrays that the captured copies read and write.
    """

    def __init__(self, cuda: _Cuda) -> None:
        self._cuda = cuda
        self.context: Any = None
        self.device: list[int] = []
        self.pinned: list[int] = []
        self.inputs: dict[str, np.ndarray[Any, Any]] = {}
        self.outputs: dict[str, np.ndarray[Any, Any]] = {}
        self.exec: Any = None
        self.replays = 0

    def device_buffer(self, nbytes: int) -> int:
        ptr = int(self._cuda.call("cudaMalloc", self._cuda.rt.cudaMalloc(max(nbytes, 1))))
        self.device.append(ptr)
        return ptr

    def staging(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """A numpy array over pinned host memory (async copies from pageable memory are
        staged by the driver, and only pinned memory is safe to capture)."""
        nbytes = max(math.prod(shape) * dtype.itemsize, 1)
        ptr = int(self._cuda.call("cudaMallocHost", self._cuda.rt.cudaMallocHost(nbytes)))
        self.pinned.append(ptr)
        raw = memoryview((ctypes.c_uint8 * nbytes).from_address(ptr)).cast("B")
        array: np.ndarray[Any, Any] = np.frombuffer(raw, dtype=dtype, count=math.prod(shape))
        return array.reshape(shape)

    def free(self) -> None:
        """Release everything; errors are ignored because the device may be gone."""
        rt = self._cuda.rt
        if self.exec is not None:
            rt.cudaGraphExecDestroy(self.exec)
            self.exec = None
        self.inputs.clear()
        self.outputs.clear()
        for ptr in self.pinned:
            rt.cudaFreeHost(ptr)
        for ptr in self.device:
            rt.cudaFree(ptr)
        self.pinned.clear()
        self.device.clear()
        self.context = None  # TensorRT frees a context when its last reference goes


class EngineRunner:
    """One deserialized engine with its execution context, stream and device buffers.

    :meth:`run` serves any shape in the profile.  :meth:`run_graph` replays a
    CUDA graph for shapes it has seen before, and falls back to :meth:`run`
    whenever a graph cannot be had.  Calls must be serialized by the caller.
    """

    def __init__(self, rt: TrtRuntime, plan: bytes, *, label: str) -> None:
        trt = rt.trt
        self._cuda = _Cuda(rt.cudart)
        self._logger = trt.Logger(trt.Logger.WARNING)
        # The runtime must outlive the engine, so it is kept on the object.
        self._runtime = trt.Runtime(self._logger)
        engine = self._runtime.deserialize_cuda_engine(plan)
        if engine is None:
            raise EngineLoadError(f"{label}: TensorRT cannot deserialize the engine")
        self.engine = engine
        self.label = label
        self.context = engine.create_execution_context()
        if self.context is None:
            raise BackendError(f"{label}: cannot create an execution context")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self.dtypes = {n: np.dtype(trt.nptype(engine.get_tensor_dtype(n))) for n in names}
        self._stream = self._cuda.call("cudaStreamCreate", rt.cudart.cudaStreamCreate())
        self._buffers: dict[str, tuple[int, int]] = {}
        alloc_cls = _output_allocator_class(trt, self._cuda)
        self._allocators: dict[str, Any] = {n: alloc_cls() for n in self.outputs}
        self._graphs: OrderedDict[ShapeKey, _Graph] = OrderedDict()
        self._uses: OrderedDict[ShapeKey, int] = OrderedDict()
        """Uses per shape not (yet) captured; ``_NO_GRAPH`` once a capture was refused."""
        self._capture_failures = 0
        self.stats = {
            "graph_replays": 0,
            "plain_runs": 0,
            "captures": 0,
            "capture_failures": 0,
            "evictions": 0,
        }

    def _device(self, name: str, nbytes: int) -> int:
        ptr, capacity = self._buffers.get(name, (0, 0))
        if nbytes <= capacity:
            return ptr
        if ptr:
            self._cuda.call("cudaFree", self._cuda.rt.cudaFree(ptr))
        ptr = int(self._cuda.call("cudaMalloc", self._cuda.rt.cudaMalloc(max(nbytes, 1))))
        self._buffers[name] = (ptr, nbytes)
        return ptr

    def run(self, feeds: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        ctx = self.context
        keep: list[np.ndarray[Any, Any]] = []  # host sources must live until the sync
        for name in self.inputs:
            host = np.ascontiguousarray(feeds[name], dtype=self.dtypes[name])
            keep.append(host)
            if not ctx.set_input_shape(name, tuple(host.shape)):
                raise UnsupportedInput(f"{self.label}: shape {host.shape} outside the profile")
            ptr = self._device(name, host.nbytes)
            self._cuda.h2d(ptr, host, self._stream)
            ctx.set_tensor_address(name, ptr)
        static: dict[str, tuple[int, ...]] = {}
        for name in self.outputs:
            shape = tuple(int(d) for d in ctx.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                ctx.set_output_allocator(name, self._allocators[name])
            else:
                nbytes = math.prod(shape) * self.dtypes[name].itemsize
                ctx.set_tensor_address(name, self._device(name, nbytes))
                static[name] = shape
        if not ctx.execute_async_v3(int(self._stream)):
            raise BackendError(f"{self.label}: execute_async_v3 failed")
        results: dict[str, np.ndarray[Any, Any]] = {}
        for name in self.outputs:
            if name in static:
                shape, ptr = static[name], self._buffers[name][0]
            else:
                alloc = self._allocators[name]
                shape, ptr = alloc.shape, alloc.ptr
            host = np.empty(shape, dtype=self.dtypes[name])
            if host.nbytes:
                self._cuda.d2h(host, ptr, self._stream)
            results[name] = host
        self._cuda.sync(self._stream)
        del keep
        return results

    # ------------------------------------------------------------------ CUDA graphs

    @property
    def graphs(self) -> int:
        """CUDA graphs currently held."""
        return len(self._graphs)

    def run_graph(
        self, feeds: Mapping[str, np.ndarray[Any, Any]]
    ) -> dict[str, np.ndarray[Any, Any]]:
        """:meth:`run` through a CUDA graph for this exact set of input shapes when one
        can be had: replayed if captured before, captured on the shape's second use.

        A graph that cannot be captured never fails the call: the shape is
        remembered as "no graph" and :meth:`run` serves it.  A failing replay
        raises :class:`BackendError`, like a failing :meth:`run`.
        """
        hosts = {n: np.ascontiguousarray(feeds[n], dtype=self.dtypes[n]) for n in self.inputs}
        key: ShapeKey = tuple(tuple(int(d) for d in hosts[n].shape) for n in self.inputs)
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            return self._replay(graph, hosts)
        uses = self._uses.pop(key, 0)
        if uses != _NO_GRAPH:
            uses += 1
        if uses >= GRAPH_AFTER_USES and self._capture_failures < _MAX_CAPTURE_FAILURES:
            out = self._capture(key, hosts)
            if out is not None:
                self.stats["plain_runs"] += 1  # the capture's warm-up enqueue answered this call
                return out
            uses = _NO_GRAPH
        self._uses[key] = uses
        while len(self._uses) > _SHAPES_REMEMBERED:
            self._uses.popitem(last=False)
        self.stats["plain_runs"] += 1
        return self.run(hosts)

    def _replay(
        self, graph: _Graph, hosts: Mapping[str, np.ndarray[Any, Any]]
    ) -> dict[str, np.ndarray[Any, Any]]:
        for name, staging in graph.inputs.items():
            staging[...] = hosts[name]
        self._cuda.call("cudaGraphLaunch", self._cuda.rt.cudaGraphLaunch(graph.exec, self._stream))
        self._cuda.sync(self._stream)
        graph.replays += 1
        self.stats["graph_replays"] += 1
        return {name: staging.copy() for name, staging in graph.outputs.items()}

    def _capture(
        self, key: ShapeKey, hosts: Mapping[str, np.ndarray[Any, Any]]
    ) -> dict[str, np.ndarray[Any, Any]] | None:
        """Capture a graph for ``key``; the outputs of its warm-up enqueue, or None."""
        graph = _Graph(self._cuda)
        try:
            out = self._build_graph(graph, hosts)
        except UnsupportedInput:
            graph.free()
            raise
        except Exception as exc:  # whatever went wrong, the plain path still serves the call
            graph.free()
            self.stats["capture_failures"] += 1
            data_dependent = isinstance(exc, _GraphCaptureFailed)
            if not data_dependent:
                self._capture_failures += 1
            level = logging.INFO if self.stats["capture_failures"] == 1 else logging.DEBUG
            log.log(level, "%s: no CUDA graph for input shapes %s: %s", self.label, key, exc)
            if self._capture_failures == _MAX_CAPTURE_FAILURES:
                log.info("%s: CUDA graph capture keeps failing; using plain enqueues", self.label)
            return None
        while len(self._graphs) >= MAX_GRAPHS:
            _, old = self._graphs.popitem(last=False)
            old.free()
            self.stats["evictions"] += 1
        self._graphs[key] = graph
        self.stats["captures"] += 1
        log.debug("%s: captured a CUDA graph for input shapes %s", self.label, key)
        return out

    def _build_graph(
        self, graph: _Graph, hosts: Mapping[str, np.ndarray[Any, Any]]
    ) -> dict[str, np.ndarray[Any, Any]]:
        cuda, rt, stream = self._cuda, self._cuda.rt, self._stream
        ctx = self.engine.create_execution_context()
        if ctx is None:
            raise _GraphCaptureFailed("cannot create an execution context")
        graph.context = ctx
        device: dict[str, int] = {}
        for name in self.inputs:
            host = hosts[name]
            if not ctx.set_input_shape(name, tuple(host.shape)):
                raise UnsupportedInput(f"{self.label}: shape {host.shape} outside the profile")
            device[name] = graph.device_buffer(host.nbytes)
            graph.inputs[name] = graph.staging(tuple(host.shape), self.dtypes[name])
            graph.inputs[name][...] = host
        for name in self.outputs:
            shape = tuple(int(d) for d in ctx.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise _GraphCaptureFailed(f"output {name} has a data-dependent shape")
            staging = graph.staging(shape, self.dtypes[name])
            device[name] = graph.device_buffer(staging.nbytes)
            graph.outputs[name] = staging
        for name, ptr in device.items():
            if not ctx.set_tensor_address(name, ptr):
                raise _GraphCaptureFailed(f"set_tensor_address({name}) refused")

        def enqueue() -> None:
            for name in self.inputs:
                cuda.h2d(device[name], graph.inputs[name], stream)
            if not ctx.execute_async_v3(int(stream)):
                raise _GraphCaptureFailed("execute_async_v3 failed")
            for name in self.outputs:
                cuda.d2h(graph.outputs[name], device[name], stream)

        # TensorRT defers work after a shape change to the next enqueue; that one
        # must run outside the capture.  It also answers this call.
        enqueue()
        cuda.sync(stream)
        out = {name: staging.copy() for name, staging in graph.outputs.items()}

        mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        cuda.call("cudaStreamBeginCapture", rt.cudaStreamBeginCapture(stream, mode))
        try:
            enqueue()
        except BaseException:
            # Leave capture mode whatever happened, or the stream stays unusable.
            err, *rest = rt.cudaStreamEndCapture(stream)
            if err == rt.cudaError_t.cudaSuccess and rest and rest[0] is not None:
                rt.cudaGraphDestroy(rest[0])
            raise
        captured = cuda.call("cudaStreamEndCapture", rt.cudaStreamEndCapture(stream))
        try:
            graph.exec = cuda.call(
                "cudaGraphInstantiateWithFlags", rt.cudaGraphInstantiateWithFlags(captured, 0)
            )
        finally:
            rt.cudaGraphDestroy(captured)  # the executable graph does not need it
        return out

    def _free_graphs(self) -> None:
        for graph in self._graphs.values():
            graph.free()
        self._graphs.clear()

    def close(self) -> None:
        """Free device memory; errors are ignored because the device may be gone."""
        self._free_graphs()
        for ptr, _ in self._buffers.values():
            self._cuda.rt.cudaFree(ptr)
        self._buffers.clear()
        for alloc in self._allocators.values():
            alloc.free()
        self._cuda.rt.cudaStreamDestroy(self._stream)


@dataclass(frozen=True)
class ModelLimits:
    max_phonemes: int
    decoder_frames: tuple[int, int, int]
    """Frame range (min, opt, max) of the decoder engine."""


class TensorRTVoiceModel(VoiceModel):
    """A voice on TensorRT: encoder and decoder engines on one CUDA stream each."""

    backend_name = "tensorrt"

    def __init__(self, encoder: EngineRunner, decoder: EngineRunner, limits: ModelLimits) -> None:
        self._encoder = encoder
        self._decoder = decoder
        self.limits = limits
        self._lock = threading.Lock()  # one execution context per engine: calls serialize
        self.meter = RunMeter()
        """Each run by part, ``gpu_encoder`` and ``gpu_decoder`` (appliance.ops.meter): the
        runtime's one meter once the pool is made (``gpu_select``), beside the CPU's."""

    @classmethod
    def load(
        cls,
        rt: TrtRuntime,
        encoder_plan: bytes,
        decoder_plan: bytes,
        *,
        device_index: int,
        limits: ModelLimits,
    ) -> TensorRTVoiceModel:
        """Deserialize both engines on ``device_index``; EngineLoadError if a plan is bad."""
        _Cuda(rt.cudart).call("cudaSetDevice", rt.cudart.cudaSetDevice(device_index))
        encoder = EngineRunner(rt, encoder_plan, label="encoder")
        try:
            decoder = EngineRunner(rt, decoder_plan, label="decoder")
        except BaseException:
            encoder.close()
            raise
        return cls(encoder, decoder, limits)

    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        n = int(ids.shape[-1])
        if n < 1 or n > self.limits.max_phonemes:
            raise UnsupportedInput(f"{n} phoneme ids outside the encoder profile")
        feeds: dict[str, np.ndarray[Any, Any]] = {
            "input": ids.reshape(1, n).astype(np.int64),
            "input_lengths": np.array([n], dtype=np.int64),
            "scales": scales.as_array(),
            "sid": np.array([speaker or 0], dtype=np.int64),
        }
        with self._lock:
            missing = [name for name in self._encoder.inputs if name not in feeds]
            if missing:
                raise UnsupportedInput(f"encoder inputs {missing} are not Piper's")
            with self.meter.timed("gpu_encoder") as run:
                out = self._encoder.run(feeds)
                run.frames = int(out[self._encoder.outputs[0]].shape[-1])
        # Output order is the ONNX graph's: z, durations[, g] (as appliance.model.voices cuts it).
        values = [out[name] for name in self._encoder.outputs]
        z = values[0].astype(np.float32, copy=False)
        durations = values[1].reshape(-1).astype(np.float32, copy=False)
        g = values[2].astype(np.float32, copy=False) if len(values) > 2 else None
        return Encoded(z=z, durations=durations, g=g)

    # The engines run the encoder whole: no separate flow on this backend.
    @property
    def flow_context(self) -> int:
        return 0

    @property
    def retimes(self) -> bool:
        """The encoder engine gives ``z`` after the flow: a rate goes into its length scale."""
        return False

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        return self.encode(ids, scales, speaker)

    def flow(self, window: Window) -> FloatArray:
        raise BackendError(f"{self.backend_name} has no separate flow")

    def _decode_exact(self, z: FloatArray, g: FloatArray | None) -> FloatArray:
        frames = int(z.shape[2])
        lo = self.limits.decoder_frames[0]
        if frames < lo:
            padded = np.zeros((z.shape[0], z.shape[1], lo), dtype=np.float32)
            padded[:, :, :frames] = z
            z = padded
        feeds = {self._decoder.inputs[0]: z}
        if len(self._decoder.inputs) > 1:
            if g is None:
                raise UnsupportedInput("decoder needs speaker conditioning g")
            feeds[self._decoder.inputs[1]] = g
        with self._lock:
            # Decoder windows come in a few recurring shapes: replay a CUDA graph for them.
            out = self._decoder.run_graph(feeds)
        samples = out[self._decoder.outputs[0]].reshape(-1).astype(np.float32, copy=False)
        hop = samples.shape[0] // int(z.shape[2])
        return samples[: frames * hop]

    def decode(self, window: Window) -> FloatArray:
        # One engine serves every window: ``urgent`` changes nothing on the GPU, and the
        # engine decodes the margins too (its shapes are the profile's).
        with self.meter.timed("gpu_decoder", int(window.z.shape[2]) - sum(window.margins)):
            audio = self._decode_whole(window.z, window.g)
        return window.kept(audio)

    def _decode_whole(self, z: FloatArray, g: FloatArray | None) -> FloatArray:
        frames = int(z.shape[2])
        hi = self.limits.decoder_frames[2]
        if frames <= hi:
            return self._decode_exact(z, g)
        core = hi - 2 * CONTEXT_FRAMES
        pieces: list[FloatArray] = []
        hop = 0
        for start in range(0, frames, core):
            end = min(start + core, frames)
            left = max(0, start - CONTEXT_FRAMES)
            right = min(frames, end + CONTEXT_FRAMES)
            audio = self._decode_exact(z[:, :, left:right], g)
            hop = audio.shape[0] // (right - left)
            pieces.append(audio[(start - left) * hop : (end - left) * hop])
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)

    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        enc = self.encode(ids, scales, speaker)
        return self.decode(Window(enc.z, enc.g))

    def graph_stats(self) -> dict[str, int]:
        """Decoder CUDA graphs: how many are held, replays vs plain enqueues, captures.

        Read without the call lock, so ``health`` never waits behind a stuck GPU call.
        """
        return {"graphs": self._decoder.graphs, **self._decoder.stats}

    def release_memory(self) -> None:
        """Nothing: the engines' buffers are sized when they are built and kept for them."""

    def close(self) -> None:
        with self._lock:
            self._encoder.close()
            self._decoder.close()


# --------------------------------------------------------------------------- accuracy gate

# Fixed sentences for the accuracy gate, as ids of Piper's espeak phoneme map
# (shared by Piper voices): "The quick brown fox jumps over the lazy dog.",
# "Turn left in two hundred metres, then keep right.", "Hello! How can I help you today?".
_S1 = [41, 59, 3, 23, 35, 120, 74, 23, 3, 15, 88, 120, 14, 100, 26, 3, 19, 120, 51, 122, 23, 31]
_S1 += [3, 17, 108, 120, 102, 25, 28, 31, 3, 121, 27, 100, 34, 60, 3, 41, 59, 3, 24, 120, 18]
_S1 += [74, 38, 21, 3, 17, 120, 51, 122, 66, 10]
_S2 = [32, 120, 62, 122, 26, 3, 24, 120, 61, 19, 32, 3, 74, 26, 3, 32, 120, 33, 122, 3, 20]
_S2 += [120, 102, 26, 17, 88, 74, 17, 3, 25, 120, 21, 122, 92, 60, 38, 8, 3, 41, 120, 61, 26]
_S2 += [3, 23, 120, 21, 122, 28, 3, 88, 120, 14, 74, 32, 10]
_S3 = [20, 59, 24, 120, 27, 100, 4, 20, 121, 14, 100, 3, 23, 39, 26, 3, 14, 74, 3, 20, 120]
_S3 += [61, 24, 28, 3, 22, 33, 122, 3, 32, 59, 17, 120, 18, 74, 13]


def _interleave(ids: list[int]) -> tuple[int, ...]:
    """Piper's id layout: BOS, pad after every phoneme, EOS."""
    out = [1, 0]
    for i in ids:
        out += [i, 0]
    return (*out, 2)


GATE_SENTENCES: tuple[tuple[int, ...], ...] = tuple(_interleave(s) for s in (_S1, _S2, _S3))
GATE_SCALES = Scales(noise_scale=0.0, length_scale=1.0, noise_w=0.0)
"""Zero noise: both backends must then compute the same deterministic waveform."""


def snr_db(reference: FloatArray, test: FloatArray) -> float:
    """Signal-to-noise ratio of ``test`` against ``reference``; -inf if lengths differ."""
    if reference.shape != test.shape:
        return -math.inf
    noise = float(np.sum((test.astype(np.float64) - reference) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def accuracy_snr_db(
    candidate: VoiceModel,
    reference: VoiceModel,
    sentences: Sequence[Sequence[int]] = GATE_SENTENCES,
) -> float:
    """Worst SNR over the fixed sentences, encoder and decoder of ``candidate`` together."""
    worst = math.inf
    for sentence in sentences:
        ids = np.asarray(sentence, dtype=np.int64)
        want = reference.fused(ids, GATE_SCALES, None)
        got = candidate.fused(ids, GATE_SCALES, None)
        worst = min(worst, snr_db(want, got))
    return worst
