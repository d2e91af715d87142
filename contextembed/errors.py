"""Exceptions that say what was wrong and how to fix it."""


class ModelNotFoundError(FileNotFoundError):
    """A model name, path or cache entry could not be found locally (nothing is ever downloaded)."""


class MissingDependencyError(ImportError):
    """An optional dependency is missing; the message gives the ``pip install`` line."""


def missing_extra(package: str, extra: str, purpose: str) -> MissingDependencyError:
    """Build the error for a missing optional package that the ``extra`` installs."""
    return MissingDependencyError(
        f"{purpose} needs the '{package}' package, which is not installed; install it with "
        f'pip install "contextembed[{extra}]"'
    )
