"""The robustness map's analysis: its runs per cell and method, the tuning choice, tables and figures."""
