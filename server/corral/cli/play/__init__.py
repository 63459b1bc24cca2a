"""`corral play`: one task played by hand in a terminal."""
