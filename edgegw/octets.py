"""Single bytes as ints, for the `int in bytes` tests of the request path.

`b"\\r" in value` is slow in CPython 3.11: `bytes.__contains__` first tries its left side as
an index, which raises a TypeError that it clears before it searches; `13 in value` is the
same search without that, and `value.find(b"ab") != -1` a substring's (find takes a buffer
first). The request path made dozens of such tests (bench/README.md, "Figures behind the
code").
"""

CR, LF, SP, HTAB, COLON, NUL = b"\r\n \t:\0"
