"""quants: find, verify and rank GGUF quantizations on the Hugging Face Hub.

The package is named ``crawler``; the distribution and the command are ``quants``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
