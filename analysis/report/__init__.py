"""Writing the report: tables, figures, lifecycle timelines, the scorecard against the paper, the ablation."""
