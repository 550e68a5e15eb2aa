"""Packaging of fleet_c.  Pure Python: nothing is compiled at install time.

The one step beyond setuptools' defaults records where this source tree is
(fleet_c/_where.py), so that an installed package can still find the library that
`make` built in the tree's build/ directory (see fleet_c/_lib.py for the search order).
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_recording_tree(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "fleet_c", "_where.py")
        with open(target, "w") as f:
            f.write('"""Written by setup.py at install time."""\n')
            f.write("SOURCE_TREE = %r\n" % os.path.dirname(HERE))


setup(cmdclass={"build_py": build_py_recording_tree})
