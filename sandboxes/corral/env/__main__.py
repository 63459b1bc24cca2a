"""`python3 -m corral.env MODULE:CLASS`: serve an env on stdin/stdout (see runtime.py)."""

import sys

from corral.env.runtime import main

sys.exit(main())
