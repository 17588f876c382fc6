"""Backends: adapters that run a library's attention kernel on canonical Inputs."""
from .base import Actual, Backend, Capabilities, Feature, LseBase, Unsupported

__all__ = ["Actual", "Backend", "Capabilities", "Feature", "LseBase", "Unsupported"]
