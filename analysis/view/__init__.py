"""The transcript viewer: `python -m analysis.view RUNS_OR_RUN_DIR --out view.html`.

One self-contained HTML file (inline script and style, data embedded as JSON, no server, no network):
the streams as a table, and per stream a filterable list of episodes with each one's prompt, reply,
outcome, lifecycle events and its key's lifecycle timeline. Streams are read and verified as the
analysis reads them (`streams`); big runs are sampled to a size budget (`sample`); the logged-sample
columns are decoded in `samples`; `page` writes the file.
"""
