"""The agent: the episode loop, the prompt a model sees, reply parsing, and replay of a logged stream."""
