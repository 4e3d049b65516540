"""Benchmark harness: latency, throughput, memory, size and quality of artifacts, side by side."""
