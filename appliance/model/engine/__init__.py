"""Inference backends: one interface; ONNX Runtime (CPU), TensorRT (GPU), a failover pool."""
