"""Running many jobs at once: the paper's experiments side by side (`reproduce`), the CPU slots their jobs
share (`slots`), and stopping a multirun's worker processes on Ctrl-C or SIGTERM (`jobs`)."""
