"""A stream's identity: the configuration and data that decide its episodes, and the folder that names
it. Its logs are written by `analysis.streamlog.stream`."""
