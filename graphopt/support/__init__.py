"""Helpers every stage may use: environment flags and the on-disk cache."""
