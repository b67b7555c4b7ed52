"""precision-oat: reinforcement learning of LLMs with numerical precision as a first-class choice."""

__version__ = "0.1.0"
