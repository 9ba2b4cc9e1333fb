"""slaguard: an SLA guard for LLM inference on a mixed GPU/NPU fleet."""

__version__ = "0.1.0"
