"""Analysis: reads run logs only (never imports an environment) and writes tables and figures."""
