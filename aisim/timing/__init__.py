"""Op-level pass timing: the op plan (plan.py), its table adapter (tables.py), PassPricer."""
