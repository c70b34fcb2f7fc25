"""The one compiled part: the server's per-file loops (ids, URL signatures, line joins).

Optional: where it cannot be built, the install still succeeds and the server makes the same
bytes with hashlib and Arrow (a warning says so at install; ``deltaport serve`` logs it at start).
Everything else is declared in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "deltaport._native",
            ["src/deltaport/_native.c"],
            extra_compile_args=[
                "-O3",
                "-std=c99",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                "-Wno-missing-field-initializers",
            ],
            optional=True,
        )
    ]
)
