"""Running many jobs at once: the paper's experiments side by side (`reproduce`), the CPU slots their jobs
share (`slots`), stopping a multirun's worker processes on Ctrl-C or SIGTERM (`jobs`), the command
line's checks before Hydra starts (`preflight`), progress (`progress`) and SLURM's job script
(`slurm_script`)."""
