"""Reading run logs: finding runs, verifying their checksums, validating columns and options."""
