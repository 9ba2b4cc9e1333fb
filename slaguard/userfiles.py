"""Reading the files users hand us (fleet, scenario, service config) with one-line errors.

Every loader turns the same OS and YAML failures into `<file>: <problem>; fix: <fix>`;
this module is the one place that wording lives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_user_text(path: Path, error: type[Exception], what: str) -> str:
    """The file's UTF-8 text; `error` names the file and the fix when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file not found; fix: pass an existing {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory; fix: pass a {what}, not a folder") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text; fix: save the {what} as UTF-8") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror}); fix: check permissions") from None


def yaml_error_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML error points at, when it points at one."""
    mark = getattr(exc, "problem_mark", None)
    return None if mark is None else int(mark.line) + 1


def load_user_yaml(path: Path, error: type[Exception], what: str) -> Any:
    """The file parsed as YAML; syntax errors name the line."""
    text = read_user_text(path, error, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc)
        where = f"line {line}" if line is not None else "<yaml>"
        raise error(f"{path}: {where}: invalid YAML; fix: correct the syntax") from None
