"""aisim: a GPU-free simulator of LLM inference serving.

Importing the package stays cheap: numba and pyarrow are imported only by the modules that
need them, so `aisim --help` and config validation never pay for them.
"""

__version__ = "0.1.0"


def predict(config, **kwargs):
    """Simulate one deployment; see aisim.api.predict."""
    from aisim.api import predict as _predict

    return _predict(config, **kwargs)


def sweep(config, grid=None, **kwargs):
    """Run a sweep and return its table; see aisim.api.sweep."""
    from aisim.api import sweep as _sweep

    return _sweep(config, grid, **kwargs)
