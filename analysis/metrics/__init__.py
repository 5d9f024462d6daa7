"""What the analysis measures over run logs: success, MPI, paired tests, adaptation and cost
(`compute`, whose `analyse` gathers them all), memory quality from the logged samples (`memory_quality`),
and how results are named and ordered wherever they are shown (`display`)."""
