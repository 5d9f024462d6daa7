"""The paper's own numbers (`paper`) and the reproduction scorecard that sets ours beside them
(`scorecard`)."""
