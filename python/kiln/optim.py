"""kiln.optim"""
