"""`corral view`: a local web app over a records folder's training runs (see docs/viewer.md)."""
