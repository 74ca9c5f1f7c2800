"""Reading and writing other formats: lazyvic format v1 (safetensors + metadata)."""

from lazyvic.interop.format_v1 import FORMAT_VERSION, load, save

__all__ = ["save", "load", "FORMAT_VERSION"]
