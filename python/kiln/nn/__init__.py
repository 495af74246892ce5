"""kiln.nn: layers and losses."""
