"""Where a stream's results live and what they are: its identity (the configuration and data that decide
its episodes, and the folder that names it) and the writer of its logs (lock, partial log, resume)."""
