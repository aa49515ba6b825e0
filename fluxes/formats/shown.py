"""A user's value as error messages quote it: one line, and short."""

from __future__ import annotations

#: Characters of a quoted value at most (the ``...`` included).
LIMIT = 40


def shown(value: object, limit: int = LIMIT, as_json: bool = False) -> str:
    """``value`` quoted for a one-line message: by repr() (``'x'``, ``None``), or with
    ``as_json`` anything but a string as the JSON the user wrote (``null``, ``[1, 2]``;
    a jobspec's values); whitespace runs become one space, and a longer text is cut to
    ``limit`` characters ending in ``...``. An integer too long to print (Python
    refuses str() past 4300 digits) is named by its size."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit integer"
    text = repr(value)
    if as_json and not isinstance(value, str):
        import json  # here: most messages never need it, and fluxes --version imports this

        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            pass
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
