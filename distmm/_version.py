"""distmm's version, apart so that modules can name it without importing the package."""

__version__ = "0.1.0"
