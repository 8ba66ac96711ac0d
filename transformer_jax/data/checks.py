"""Config checks that fail early with messages naming the field, the value and what is valid."""

from typing import Any


def require(ok: bool, field: str, value: Any, valid: str, *, prefix: str = "data.") -> None:
    """Raises ValueError("data.<field>=<value> is invalid; valid: <valid>") unless `ok`.

    `prefix` names where the field lives: "data." for config.data fields, "" for arguments.
    """
    if not ok:
        raise ValueError(f"{prefix}{field}={value!r} is invalid; valid: {valid}")


def require_at_least(field: str, value: int, low: int, *, prefix: str = "data.") -> None:
    require(value >= low, field, value, f"an integer >= {low}", prefix=prefix)


def utf8_text(content: bytes, what: str, valid: str) -> str:
    """`content` decoded as UTF-8; else a ValueError naming `what` (the file or example), the
    offset, value and line of its first byte that is not UTF-8, and what is `valid`."""
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{what} is not UTF-8 text (invalid byte at offset {error.start}: "
            f"0x{content[error.start]:02x}, line {line}); valid: {valid}"
        ) from None


def resolve_max_len(field: str, value: int, needed: int, why: str) -> int:
    """`needed` when `value` is -1 (derive from the task), else `value` if it fits `needed`."""
    if value == -1:
        return needed
    require(value >= needed, field, value, f"-1 (derive) or >= {needed} ({why})")
    return value
