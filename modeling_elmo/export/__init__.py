"""Exporting ELMo (`torch.export`, the dynamo ONNX exporter) with a dynamic word axis: `dynamic_words`. Not part of the
Hub code files (the loop operator it traces is not a public torch API; the shipped files export with dynamic batches
and a fixed number of words)."""

from .recurrence import dynamic_words, onnx_translates_scan, scanned_lstm

__all__ = ["dynamic_words", "onnx_translates_scan", "scanned_lstm"]
