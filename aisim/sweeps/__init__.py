"""Sweeps: a base config plus grids of overrides, run locally or on Ray (aisim sweep).

The notebook API is `aisim.sweep(config, grid, ...)` (aisim.api.sweep).
"""
