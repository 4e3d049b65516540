"""How compressed models are stored and rebuilt: leaf modules shared by the stages and the runtime.

- :mod:`compress.runtime.formats.layouts`: where the prunable parts of a layer live, per architecture family;
- :mod:`compress.runtime.formats.pruned`: per-layer pruned shapes in ``config.json`` and the loader that
  rebuilds such a model (plain torch, no torch-pruning);
- :mod:`compress.runtime.formats.torch_int8`: PyTorch dynamic-INT8 weights in safetensors, without pickle;
- :mod:`compress.runtime.formats.onnx`: the ONNX file name and the operators that mark an INT8 graph;
- :mod:`compress.runtime.formats.bf16`: PyTorch weights in bfloat16 safetensors (``torch-bf16``);
- :mod:`compress.runtime.formats.openvino`: an OpenVINO IR (fp32, or NNCF INT8) and how it is opened (optional extra);
- :mod:`compress.runtime.formats.choice`: a folder that points at the fastest artifact per batch size.

Nothing here imports a stage: serving a model needs these, never the code that made it.
"""
