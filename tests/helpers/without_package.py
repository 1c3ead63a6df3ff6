"""Run a launch script as if a package were not installed.

    python tests/helpers/without_package.py wandb launch/run_sac.py --flags...

Importing the package, or any module in it, raises ModuleNotFoundError, as on a machine
without it.
"""

import importlib.abc
import runpy
import sys

blocked = sys.argv[1]


class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == blocked or name.startswith(blocked + "."):
            raise ModuleNotFoundError(f"No module named '{blocked}'", name=blocked)
        return None


sys.meta_path.insert(0, Missing())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
