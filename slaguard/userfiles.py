"""Reading the files users hand us (fleet, scenario, service config) with one-line errors.

Every loader turns the same OS and YAML failures into `<file>: <problem>; fix: <fix>`;
this module is the one place that wording lives.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

USER_FILE_MAX_BYTES = 16 * 1024 * 1024
"""Fleet, scenario and config files are kilobytes; `--fleet /dev/zero` read until memory
ran out, and a 2 GB file by mistake would too."""


def read_user_text(path: Path, error: type[Exception], what: str) -> str:
    """The file's UTF-8 text; `error` names the file and the fix when it cannot be read,
    is not a regular file (a FIFO hung waiting for a writer, a device never ended) or is
    over `USER_FILE_MAX_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting
    except FileNotFoundError:
        raise error(f"{path}: file not found; fix: pass an existing {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror}); fix: check permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{path}: is a directory; fix: pass a {what}, not a folder")
        if not stat.S_ISREG(mode):
            raise error(
                f"{path}: not a regular file (a device, pipe or socket); fix: pass a {what} "
                "saved on disk"
            )
        data = _read_at_most(fd, USER_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror}); fix: check permissions") from None
    finally:
        os.close(fd)
    if len(data) > USER_FILE_MAX_BYTES:
        raise error(
            f"{path}: larger than {USER_FILE_MAX_BYTES >> 20} MB; fix: pass the {what}, "
            "which is a few kilobytes of YAML"
        )
    try:
        return data.decode("utf-8")  # PyYAML reads CR and CRLF line breaks as LF
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text; fix: save the {what} as UTF-8") from None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    while limit > 0 and (chunk := os.read(fd, min(limit, 1 << 20))):
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def yaml_error_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML error points at, when it points at one."""
    mark = getattr(exc, "problem_mark", None)
    return None if mark is None else int(mark.line) + 1


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names a key twice (plain YAML keeps the last one, silently)."""


MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (in a fleet file
    the second `targets:` replaced the first without a word), with YAML 1.2's booleans."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Mark] = {}  # where each key was first given, for the message
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:  # `<<: *base`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # a list or mapping as a key: the base loader refuses it in one line
            if key in first:
                raise DuplicateKeyError(
                    "first given", first[key], f"duplicate key {key!r}", key_node.start_mark
                )
            first[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


BOOL_TAG = "tag:yaml.org,2002:bool"

# YAML 1.2's booleans only: PyYAML resolves YAML 1.1's `yes`, `no`, `on` and `off` too, so
# `migrate: yes` was true though `SLAGUARD_SERVE_MIGRATE=yes` is refused and `id: no` was
# false. They stay text here, for the strict fields to refuse or take as text.
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.add_implicit_resolver(
    BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def parse_user_yaml(text: str, source: str, error: type[Exception]) -> Any:
    """YAML text parsed with `UniqueKeyLoader`; mistakes name the line."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except DuplicateKeyError as exc:
        line = yaml_error_line(exc)
        first = None if exc.context_mark is None else exc.context_mark.line + 1
        raise error(
            f"{source}: line {line}: {exc.problem} (first on line {first}); fix: keep one "
            "(the second would replace the first)"
        ) from None
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc)
        where = f"line {line}" if line is not None else "<yaml>"
        raise error(f"{source}: {where}: invalid YAML; fix: correct the syntax") from None


def load_user_yaml(path: Path, error: type[Exception], what: str) -> Any:
    """The file parsed as YAML; syntax errors and duplicate keys name the line."""
    return parse_user_yaml(read_user_text(path, error, what), str(path), error)
