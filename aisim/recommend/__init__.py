"""`aisim recommend`: the deployment that meets the SLA at the best target value, found by
simulating every candidate of AISimulate's recommend search space (docs/recommend.md)."""
