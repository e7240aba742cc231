"""Sweeps: a base config plus grids of overrides, run locally or on Ray (aisim sweep).

`aisim.sweep(config, grid, ...)` is the notebook API (aisim.api.sweep); this package is
callable so that the name works whether or not the package has been imported.
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, config, grid=None, **kwargs):
        from aisim.api import sweep

        return sweep(config, grid, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
