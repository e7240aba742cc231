"""aisim: a GPU-free simulator of LLM inference serving.

Importing the package stays cheap: numba and pyarrow are imported only by the modules that
need them, so `aisim --help` and config validation never pay for them.
"""

__version__ = "0.1.0"
