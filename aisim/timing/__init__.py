"""Op-level pass timing: op plans composed per model family (families.py, family_*.py from
leaf_*.py builders; plan_record.py, plan_cache.py), their tables (tables.py), PassPricer."""
