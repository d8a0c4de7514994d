"""Writing results as JSON, atomically (a temporary file renamed into place), so no partial file is left.

The file's directory must exist: a typo in a path is refused (`InvalidInputError`), never silently created.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any

from .._errors import InvalidInputError


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def check_json_path(path: str | os.PathLike) -> str:
    """Refuse a JSON output path whose directory does not exist, or that names a directory; return it as text."""
    text = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(directory):
        raise InvalidInputError(f"cannot write JSON to {text!r}: directory {directory!r} does not exist "
                                "(create it first; certify does not create directories)")
    if os.path.isdir(text):
        raise InvalidInputError(f"cannot write JSON to {text!r}: it is a directory, not a file name")
    return text


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write obj as indented JSON to path (whose directory must exist); non-finite floats become strings."""
    check_json_path(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, suffix=".json.tmp")
    except OSError as error:
        raise InvalidInputError(f"cannot write JSON to {os.fspath(path)!r}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(_clean(obj), file, indent=2)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise InvalidInputError(f"cannot write JSON to {os.fspath(path)!r}: {error.strerror or error}") from None
        raise
