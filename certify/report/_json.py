"""Writing results as JSON, atomically (a temporary file renamed into place), so no partial file is left."""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write obj as indented JSON to path; non-finite floats become strings ("inf", "nan")."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, suffix=".json.tmp")
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(_clean(obj), file, indent=2)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
