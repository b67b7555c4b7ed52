"""The offline mismatch lab (``python -m precision_oat.lab``) and the fp16 preflight run before training.

Both measure μ against π on the same tokens with the metrics of
:mod:`precision_oat.precision.mismatch_metrics`, the ones a training run logs each step.
"""
