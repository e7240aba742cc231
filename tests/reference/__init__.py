"""Deliberately plain Python references of the simulator rules, for randomized kernel checks."""
