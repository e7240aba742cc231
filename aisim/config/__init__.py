"""AISimulate-compatible YAML configs: load, override, validate into frozen dataclasses.

Public API::

    load_config(path, overrides=())        # file -> Config (ConfigError on the first problem)
    parse_config(raw, source="<config>")   # already-loaded mapping -> Config
    apply_overrides(raw, overrides)        # --set PATH=YAML_VALUE, in order, on a copy
    unsupported_features(cfg)              # lines for valid requests aisim cannot run yet
"""

from aisim.config.features import NOT_YET_AVAILABLE, unsupported_features
from aisim.config.load import apply_overrides, load_config, parse_config
from aisim.config.schema import (
    ConcurrencyLoad,
    Config,
    ConstantRateLoad,
    DefaultCapacity,
    DefaultTiming,
    Engine,
    Evaluation,
    FixedCapacity,
    FixedTiming,
    KVCache,
    KVCapacityFractionLoad,
    KVTransfer,
    NgramSpeculation,
    Parallelism,
    PoissonLoad,
    PolynomialTiming,
    Scheduler,
    SchemeSpeculation,
    SessionShape,
    Sla,
    Stop,
    SyntheticSessionSource,
    SyntheticSource,
    Tokenization,
    TraceSource,
    TraceTimestampsLoad,
    Traffic,
    Worker,
)

__all__ = [
    "NOT_YET_AVAILABLE",
    "ConcurrencyLoad",
    "Config",
    "ConstantRateLoad",
    "DefaultCapacity",
    "DefaultTiming",
    "Engine",
    "Evaluation",
    "FixedCapacity",
    "FixedTiming",
    "KVCache",
    "KVCapacityFractionLoad",
    "KVTransfer",
    "NgramSpeculation",
    "Parallelism",
    "PoissonLoad",
    "PolynomialTiming",
    "Scheduler",
    "SchemeSpeculation",
    "SessionShape",
    "Sla",
    "Stop",
    "SyntheticSessionSource",
    "SyntheticSource",
    "Tokenization",
    "TraceSource",
    "TraceTimestampsLoad",
    "Traffic",
    "Worker",
    "apply_overrides",
    "load_config",
    "parse_config",
    "unsupported_features",
]
