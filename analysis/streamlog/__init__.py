"""A stream's log, the bottom layer that the harness and the analysis share: the episode record
(`record`), the lifecycle event vocabulary (`events`), the staleness rule (`staleness`), how values
become the log's bytes (`encoding`), and the stream's files with their one writer and reader (`stream`).
Imports nothing else of the project."""
