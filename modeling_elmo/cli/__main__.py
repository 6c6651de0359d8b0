"""``python -m modeling_elmo.cli COMMAND ...``: the ``elmo`` command."""

import sys

from . import main

sys.exit(main())
