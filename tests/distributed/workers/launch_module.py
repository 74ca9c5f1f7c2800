"""Run with ``lazyvic run -m launch_module``: write the module's name, sys.argv and RANK to
``$LAUNCH_OUT/<rank>.json``."""

import json
import os
import sys
from pathlib import Path

result = {"name": __name__, "argv": sys.argv, "rank": os.environ["RANK"]}
(Path(os.environ["LAUNCH_OUT"]) / f"{os.environ['RANK']}.json").write_text(json.dumps(result))
