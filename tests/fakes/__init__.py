"""Fakes for hardware this machine lacks (NVML, TensorRT, CUDA), each imitating one seam."""
