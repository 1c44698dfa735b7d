"""Operations: settings, paths, logging, systemd, metrics, the NVML seam and watchdog."""
