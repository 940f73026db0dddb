# A small C-extension package for tests/bench/cache.sh: built into a wheel
# by the benchmark's first stage.
from setuptools import Extension, setup

setup(
    name="benchext",
    version="1.0",
    ext_modules=[Extension("benchext", ["benchext.c"])],
)
