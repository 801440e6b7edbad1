"""Single bytes as ints, for the `int in bytes` tests of the request path.

`b"\\r" in value` costs CPython 3.11 about 230 ns: `bytes.__contains__` first tries its left
side as an index, which raises a TypeError that it clears before it searches. `13 in value`
is the same search for about 16 ns, and `value.find(b"ab") != -1` a substring's for about
100 (find takes a buffer first). A proxied request made 44 `bytes in bytes` tests, ~85,000
of its ~1.05 million instructions (callgrind; bench/README.md, history).
"""

CR, LF, SP, HTAB, COLON, NUL = b"\r\n \t:\0"
