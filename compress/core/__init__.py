"""The bottom layer: errors, artifacts, assets and the hub, devices, progress, numerics and the measuring
primitives (machine facts, intervals) that the stages and the benchmark share. Imports nothing above it
(docs/development.md, "Layers")."""
