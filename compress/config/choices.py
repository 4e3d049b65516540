"""The settings' fixed choices and shared texts: sampling orders, quantize methods, schedules, help strings.

One place for each list a config field validates against and a flag offers (``compress.cli`` reads the
fields' metadata, not these names again).
"""

from __future__ import annotations




SAMPLINGS = ("group_by_length", "random", "sequential")
#: ``distill --soft-labels``: who labels the training rows (compress.stages.distill.teacher_copies).
SOFT_LABEL_RUNTIMES = ("auto", "pytorch", "openvino-fp32", "onnx-int8")
#: How ``--unlabeled-limit`` picks its texts: a seeded sample, or the texts most like the task's (compress.corpora.similarity).
UNLABELED_SELECTIONS = ("random", "similar")
#: ``auto`` builds a copy of the teacher only for at least this many rows still to label: building it
#: (export and conversion or quantization) and checking it on validation cost about as much as labelling this
#: many rows with the fp32 teacher, a ratio that does not depend on the teacher's size (both scale with it).
SOFT_LABELS_AUTO_MIN_ROWS = 2000
SOFT_LABELS_HELP = ("who labels the training rows and the transfer set: a copy of the teacher, onnx-int8 (ONNX Runtime "
                    "INT8) or openvino-fp32 (its fp32 graph in OpenVINO), used only where it agrees with the PyTorch "
                    "teacher on --soft-labels-min-agreement of the validation split; pytorch (the teacher itself); or "
                    "auto (onnx-int8 where the teacher would label in fp32 on a CPU with VNNI, with at least "
                    f"{SOFT_LABELS_AUTO_MIN_ROWS:,} rows to label and no intermediate losses, kept only if it also "
                    "labels a validation sample faster; else pytorch)")
UNLABELED_BALANCE_HELP = ("draw the seeded sample (distill's --unlabeled-limit, pretrain's --corpus-limit) evenly "
                          "across the values of this column of the corpus "
                          "(its source, channel or domain; a small group gives all its rows and the rest is shared "
                          "among the others); wnut17-unlabeled has 'source' (twitter, reddit, stackexchange, youtube)")
SCHEDULES = ("joint", "two-stage")
#: ``optimize --lengths``: what the candidates are timed on (compress.stages.optimize.choose).
TIMING_LENGTHS = ("fixed", "real")
TIMING_LENGTHS_HELP = ("what the candidates are timed on: fixed (default), every input padded or cut to --seq-len "
                       "tokens, one shape for all; real, the validation texts at their own lengths, as Predictor runs "
                       "them (batch 1: one text a request; larger: length-sorted batches padded to their longest "
                       "row), in a seeded order: the traffic of short, varying sentences, where a runtime tuned for "
                       "one shape can lose its lead")
#: Where ``--mention-variants`` draws its replacement mentions (compress.stages.transfer.mentions): the training split's
#: gold mentions, or those and the ones the teacher tags with confidence in the ``--unlabeled`` text.
MENTION_POOLS = ("train", "train+transfer")
IMPORTANCES = ("magnitude", "taylor")
SCOPES = ("uniform", "global")
#: A tagger's INT8 (or other compressed) candidate fails when one entity type loses more F1 than this against
#: the fp32 model on validation, by a loss the split tells from noise
#: (compress.tasks.token_classification.scoring.types_over_budget).
MAX_TYPE_F1_DROP = 0.03
#: Types with fewer gold entities in the split are reported, never judged by the per-type rules (one entity
#: moves their F1 by tenths).
MIN_TYPE_SUPPORT = 10
MAX_TYPE_F1_DROP_HELP = (f"a tagger's per-type budget: a candidate is out when an entity type with {MIN_TYPE_SUPPORT} or more gold "
                         "entities in validation loses more F1 than this (0.03 = three points) and its paired 95%% "
                         "bootstrap interval over sentences lies above zero; 1 turns the rule off")
QUANTIZE_METHODS = ("ort-dynamic", "torch-dynamic", "ort-static", "torch-bf16", "openvino-fp32", "openvino-int8")
#: The fp32 ONNX graph the ONNX Runtime methods quantize (``None``: the method's default).
QUANTIZE_GRAPHS = ("fused", "unfused")
INIT_CHOICES = ("random", "teacher-layers", "minilm", "pretrained:PATH")
#: Augmentation operations, in the order ``--augment-ops`` lists them by default.
AUGMENT_OPS = ("replace", "mask", "delete", "swap")
#: The flags of the data a stage reads; a recipe gives them once, in its ``data:`` section.
DATA_KEYS = ("data", "text_column", "text_pair_column", "label_column", "token_column", "tag_column",
             "question_column", "context_column", "answers_column", "sentence1_column", "sentence2_column",
             "score_column", "score_range", "limit", "split_seed")
#: The training flags every training command has (``prune`` has a subset, see :class:`PruneConfig`).
TRAIN_FLAGS = ("epochs", "lr", "batch_size", "grad_accum", "warmup_ratio", "seed", "max_steps", "min_steps",
               "save_steps", "sampling")
#: The training flags of the stages that pick among their epochs (teacher and distill; not pretrain or prune).
SELECTION_FLAGS = ("keep_best",)
PRUNE_TRAIN_FLAGS = ("lr", "batch_size", "grad_accum", "warmup_ratio", "seed", "save_steps", "sampling")
#: The help of ``--precision``, the one setting every stage that trains or runs a model has (:func:`_precision`).
PRECISION_HELP = ("auto (default): bf16 autocast only where the device runs it natively (a CPU with avx512_bf16 or "
                  "amx_bf16, a GPU with bf16; fp16 on a GPU without), fp32 otherwise; or fp32, bf16, fp16 (GPU). "
                  "The choice and its reason are printed and recorded in compress.json")
#: The bench presets. FULL: the anchors of the design notes, 50 warm-up and 300 timed runs. QUICK
#: (``--quick``): a smoke run that finishes in seconds, for CI plumbing and trying the command out.
FULL = {"warmup": 50, "runs": 300, "batch_sizes": (1, 8, 32), "seq_lens": (32, 128), "limit": None}
QUICK = {"warmup": 3, "runs": 10, "batch_sizes": (1,), "seq_lens": (32,), "limit": 64}


__all__ = ['SAMPLINGS', 'SOFT_LABEL_RUNTIMES', 'UNLABELED_SELECTIONS', 'SOFT_LABELS_AUTO_MIN_ROWS', 'SOFT_LABELS_HELP', 'UNLABELED_BALANCE_HELP', 'SCHEDULES', 'MENTION_POOLS', 'IMPORTANCES', 'SCOPES', 'MAX_TYPE_F1_DROP', 'MIN_TYPE_SUPPORT', 'MAX_TYPE_F1_DROP_HELP', 'QUANTIZE_METHODS', 'QUANTIZE_GRAPHS', 'INIT_CHOICES', 'AUGMENT_OPS', 'DATA_KEYS', 'TRAIN_FLAGS', 'SELECTION_FLAGS', 'PRUNE_TRAIN_FLAGS', 'PRECISION_HELP', 'FULL', 'QUICK']
