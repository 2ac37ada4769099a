"""Hypothesis strategies for tests/fault/test_fuzz.py: adversarial agent.v1 request values.

Everything here is pure (no server): strings, JSON texts, numbers, ids and raw bytes. Values
that depend on the server's state (the ids of runs it holds) are passed in as lists.

Huge values are built by repetition (`piece * n`), so hypothesis draws a handful of choices
for a string of megabytes; strings never hold surrogates (protobuf strings are UTF-8).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

# Documented request bounds (docs/OPERATIONS.md), in bytes of UTF-8.
MAX_INPUT_BYTES = 262_144
MAX_METADATA_BYTES = 16_384
MAX_REQUEST_ID_BYTES = 256
MAX_RECEIVE_BYTES = 4 * 1024 * 1024

KNOWN_TOOLS = ("calculator", "current_time")

# Odd but valid UTF-8: NUL, bidi controls, RTL scripts, emoji and ZWJ sequences, BOM,
# non-characters, the last code point, combining marks, line separators, tags, look-alikes.
ODD_PIECES = (
    "\x00",
    "a\x00b",
    "\u202e",
    "\u200f\u05e9\u05dc\u05d5\u05dd",
    "\u0645\u0631\u062d\u0628\u0627",
    "\U0001f600",
    "\U0001f469\u200d\U0001f4bb",
    "\ufeff",
    "\ufffe",
    "\uffff",
    "\U0010ffff",
    "e\u0301\u0301\u0301",
    "\u200b",
    "\u2028",
    "\r\n",
    "\t",
    "\x1b[2J",
    "\x7f",
    "\xa0",
    "\u3000",
    "\U000e0041",
    "\uff4c\uff4f\uff43\uff41\uff4c",
    "\u0661\u0662\u0663",
    "%s%n%x",
    "'; DROP TABLE runs; --",
    "../../etc/passwd",
    "\\",
    '"',
    "{}",
    "null",
    " ",
)


def unicode_text(max_size: int = 24) -> st.SearchStrategy[str]:
    """Any text without surrogates (which UTF-8 cannot carry)."""
    return st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=max_size)


def odd_text(max_size: int = 24) -> st.SearchStrategy[str]:
    return st.one_of(
        unicode_text(max_size),
        st.sampled_from(ODD_PIECES),
        st.lists(st.sampled_from(ODD_PIECES), min_size=1, max_size=6).map("".join),
    )


def of_bytes(piece: str, size: int) -> str:
    """`piece` repeated to `size` bytes of UTF-8 (padded with "x" when it does not divide)."""
    unit = len(piece.encode())
    text = piece * (size // unit)
    return text + "x" * (size - len(text.encode()))


HUGE_PIECES = ("x", "\u00e9", "\U0001f600", "a ", "\u202e", "\x00", "word ")


def huge_text(sizes: Sequence[int]) -> st.SearchStrategy[str]:
    return st.builds(of_bytes, st.sampled_from(HUGE_PIECES), st.sampled_from(sizes))


def adversarial_text(sizes: Sequence[int], max_size: int = 24) -> st.SearchStrategy[str]:
    """Empty, blank, odd or huge text (sizes: the huge ones, in bytes)."""
    return st.one_of(
        st.just(""),
        st.sampled_from(("   ", "\t\n", "\u3000", "\u200b")),
        odd_text(max_size),
        huge_text(sizes),
    )


# --- JSON -----------------------------------------------------------------------------------

NESTING = (1, 2, 63, 64, 65, 100, 500, 999, 1000, 1001, 1500, 2000, 3000)


def nested(depth: int, shape: str) -> str:
    """JSON text nested `depth` levels deep: arrays, objects, or both by turns."""
    match shape:
        case "array":
            return "[" * depth + "]" * depth
        case "object":
            return '{"a":' * depth + "1" + "}" * depth
        case _:
            return '[{"a":' * (depth // 2) + "0" + "}]" * (depth // 2)


def nested_json() -> st.SearchStrategy[str]:
    return st.builds(
        nested, st.sampled_from(NESTING), st.sampled_from(("array", "object", "mixed"))
    )


# Number literals that Python's json takes but are not finite, or are absurdly large.
EXTREME_NUMBERS = (
    "1e309",
    "-1e309",
    "Infinity",
    "-Infinity",
    "NaN",
    "1e300",
    "-1e300",
    "1e-400",
    str(2**64),
    str(2**1024),
    "1" + "0" * 4300,
    "1" + "0" * 4299,
    "-0",
    "-0.0",
    "1E+2147483648",
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    unicode_text(16),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(unicode_text(8), inner, max_size=4)
    ),
    max_leaves=12,
)


def metadata() -> st.SearchStrategy[str]:
    """CreateRunRequest.metadata: objects (valid, deep, with odd numbers), other JSON, junk."""
    obj = st.dictionaries(unicode_text(12), json_values, max_size=5).map(json.dumps)
    deep_in_object = nested_json().map(lambda inner: '{"deep": ' + inner + "}")
    number_in_object = st.sampled_from(EXTREME_NUMBERS).map(lambda n: '{"n": ' + n + "}")
    big_object = st.sampled_from(
        (MAX_METADATA_BYTES - 10, MAX_METADATA_BYTES - 9, MAX_METADATA_BYTES, 70_000)
    ).map(lambda size: '{"s": "' + "x" * size + '"}')
    junk = st.sampled_from(
        (
            "[]",
            "[1, 2]",
            "null",
            "1",
            '"text"',
            "{",
            "{}}",
            "{} trailing",
            " {} ",
            "\ufeff{}",
            '{"a": 1, "a": 2}',
            '{"\\u0000": "\\ud800"}',
            '{"a": "\x00"}',
            "{'single': 'quotes'}",
            '{"a": 01}',
            '{"a": .5}',
            '{"a": +1}',
            '{"a": [1,]}',
        )
    )
    return st.one_of(
        st.just(""),
        obj,
        deep_in_object,
        nested_json(),
        number_in_object,
        big_object,
        junk,
        odd_text(),
    )


# --- the local `script` model ----------------------------------------------------------------

# delay_ms and retry_after_s: small, valid values, or values no run should wait for (a delay
# beyond any bound, infinity, NaN, negative, not a number).
SMALL_DELAYS_MS = ("0", "1", "2.5")
ABSURD_DELAYS_MS = (
    "1e309",
    "Infinity",
    "NaN",
    "-1",
    "-1e309",
    "1e300",
    "1e18",
    "600001",
    str(2**64),
    "1" + "0" * 4400,
    "true",
    '"5"',
    "[]",
)
SMALL_RETRY_AFTER_S = ("0", "0.01")
ABSURD_RETRY_AFTER_S = ("61", "86401", "1e9", "1e309", "Infinity", "NaN", "-1", '"1"')
# deltas: small counts, or invalid ones (a huge count is refused, not streamed for ever).
SMALL_DELTAS = ("0", "1", "3")
ABSURD_DELTAS = ("-1", "1.5", '"3"', "true", "1000001", str(2**64), "1e309", "NaN")

CALCULATOR_EXPRESSIONS = (
    "1 + 2",
    "9**9**9",
    "10**1000",
    "2**-1000",
    "1/0",
    "1e309",
    "(" * 150 + "1" + ")" * 150,
    "-" * 990 + "1",
    "1" * 999,
    "__import__('os')",
    "",
    "\x00",
)


def tool_call() -> st.SearchStrategy[str]:
    name = st.one_of(
        st.sampled_from(KNOWN_TOOLS),
        st.sampled_from(KNOWN_TOOLS),
        st.sampled_from(("", "nope", "calculator ")),
        odd_text(12),
    )
    calculator = st.sampled_from(CALCULATOR_EXPRESSIONS).map(
        lambda e: json.dumps({"expression": e})
    )
    # A JSON string is sent verbatim as the arguments: invalid, deep or non-finite JSON text
    # reaches the tool registry (the script itself stays valid).
    verbatim = st.one_of(
        st.sampled_from(("{not json", "[1, 2", "", "null", '{"expression": "1+1"} trailing')),
        nested_json(),
        st.sampled_from(EXTREME_NUMBERS).map(lambda n: '{"expression": ' + n + "}"),
    ).map(json.dumps)
    arguments = st.one_of(
        calculator, calculator, st.just("{}"), json_values.map(json.dumps), verbatim
    )
    return st.builds(
        lambda n, a: '{"name": ' + json.dumps(n) + ', "arguments": ' + a + "}", name, arguments
    )


ERRORS = ("rate_limited", "unavailable", "context_overflow", "bad_request")
SAYINGS = ("tool_results", "tools", "history", "instructions", "summary")

# A step's fields as JSON texts; each is valid on its own.
valid_step = st.fixed_dictionaries(
    {},
    optional={
        "text": odd_text(40).map(json.dumps),
        "deltas": st.sampled_from(SMALL_DELTAS),
        "delay_ms": st.sampled_from(SMALL_DELAYS_MS),
        "error": st.sampled_from(ERRORS).map(json.dumps),
        "retry_after_s": st.sampled_from(SMALL_RETRY_AFTER_S),
        "finish": st.sampled_from(("stop", "length", "tool_calls")).map(json.dumps),
        "say": st.sampled_from(SAYINGS).map(json.dumps),
        "tool_calls": st.lists(tool_call(), max_size=3).map(lambda c: "[" + ", ".join(c) + "]"),
    },
)

# One field of one step made absurd: a number no run should wait for or stream, a value of
# the wrong type, an unknown field.
poison = st.one_of(
    st.tuples(st.just("delay_ms"), st.sampled_from(ABSURD_DELAYS_MS)),
    st.tuples(st.just("delay_ms"), st.sampled_from(ABSURD_DELAYS_MS)),
    st.tuples(st.just("deltas"), st.sampled_from(ABSURD_DELTAS)),
    st.tuples(st.just("retry_after_s"), st.sampled_from(ABSURD_RETRY_AFTER_S)),
    st.tuples(st.sampled_from(("error", "finish", "say")), st.just('"?"')),
    st.tuples(st.just("text"), st.sampled_from(("1", "null", "[]", "{}"))),
    st.tuples(st.just("unknown"), st.just("1")),
    st.tuples(
        st.just("tool_calls"),
        st.sampled_from(("{}", "[1]", '[{"arguments": {}}]', '"x"', "null")),
    ),
)


def render_script(steps: list[dict[str, str]], poisoned: tuple[int, tuple[str, str]] | None) -> str:
    steps = [dict(step) for step in steps]
    if poisoned is not None and steps:
        index, (name, value) = poisoned
        step = steps[index % len(steps)]
        step[name] = value
        if name == "retry_after_s":  # only a rate_limited error reads it
            step["error"] = '"rate_limited"'
    rendered = ("{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in s.items()) + "}" for s in steps)
    return '{"steps": [' + ", ".join(rendered) + "]}"


def script_input() -> st.SearchStrategy[str]:
    """Input for the `script` model: scripts with adversarial steps, or not a script at all."""
    steps = st.builds(
        render_script,
        st.lists(valid_step, min_size=1, max_size=4),
        st.one_of(st.none(), st.tuples(st.integers(0, 3), poison)),
    )
    poisoned = st.builds(
        render_script,
        st.lists(valid_step, min_size=1, max_size=4),
        st.tuples(st.integers(0, 3), poison),
    )
    # A turn of tool calls, then an answer: the tools run with adversarial arguments.
    tool_turn = st.lists(tool_call(), min_size=1, max_size=3).map(
        lambda calls: (
            '{"steps": [{"tool_calls": [' + ", ".join(calls) + ']}, {"say": "tool_results"}]}'
        )
    )
    return st.one_of(
        steps,
        steps,
        tool_turn,
        tool_turn,
        poisoned,
        nested_json().map(lambda inner: '{"steps": [' + inner + "]}"),
        nested_json().map(lambda inner: '{"steps": [{"text": "a", "x": ' + inner + "}]}"),
        nested_json(),
        st.sampled_from(EXTREME_NUMBERS).map(lambda n: '{"steps": [], "n": ' + n + "}"),
        st.sampled_from(('{"steps": {}}', '{"steps": null}', "[]", "not json", '{"steps": [1]}')),
    )


# --- ids, cursors, pages -----------------------------------------------------------------------
#
# Which runs the server holds changes as the fuzz goes on, and hypothesis needs the same
# choices to give the same draws: so an id is drawn as an IdSpec (a slot into the known ids, a
# spelling of one, or a literal) and resolved against the server's ids at run time.

VARIANTS = (
    "upper",
    "braces",
    "urn",
    "hex",
    "leading space",
    "trailing newline",
    "trailing NUL",
    "one short",
    "one long",
    "non-hex",
    "zero-width space",
    "unicode hyphens",
    "doubled",
)


def variant(value: str, name: str) -> str:
    """A spelling of UUID `value` other than its canonical one, or a near miss of it."""
    return {
        "upper": value.upper(),
        "braces": "{" + value + "}",
        "urn": "urn:uuid:" + value,
        "hex": value.replace("-", ""),
        "leading space": " " + value,
        "trailing newline": value + "\n",
        "trailing NUL": value + "\x00",
        "one short": value[:-1],
        "one long": value + "0",
        "non-hex": value[:-1] + "g",
        "zero-width space": value[:8] + "\u200b" + value[8:],
        "unicode hyphens": value.replace("-", "\u2010"),
        "doubled": value * 2,
    }[name]


@dataclass(frozen=True)
class IdSpec:
    """A run or session id: `known` (slot into the known ids), a `variant` of one, a `literal`."""

    kind: str
    slot: int = 0
    variant: str = ""
    literal: str = ""

    def resolve(self, known: Sequence[str]) -> str:
        if self.kind == "literal" or not known:
            return self.literal
        value = known[-1] if self.kind == "last" else known[self.slot % len(known)]
        return variant(value, self.variant) if self.kind == "variant" else value

    def __repr__(self) -> str:
        if self.kind == "literal":
            return f"IdSpec(literal={short(self.literal)})"
        return f"IdSpec({self.kind}, slot={self.slot}{', ' + self.variant if self.variant else ''})"


def short(value: str | bytes) -> str:
    if len(value) > 80:
        return f"{value[:40]!r}…<{len(value)}>"
    return repr(value)


def unknown_uuid() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from((0, 2**128 - 1)).map(lambda n: str(uuid.UUID(int=n))),
        st.uuids().map(str),
        st.integers(0, 2**128 - 1).map(lambda n: str(uuid.UUID(int=n))),
    )


def malformed_id() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(("", " ", "nope", "123", "-" * 36, "0" * 35, "0" * 32 + "\x00")),
        odd_text(),
        unicode_text(40),
        huge_text((1_000, 100_000, 1_000_000)),
    )


def ids() -> st.SearchStrategy[IdSpec]:
    """A known id (often; "last" is the newest, e.g. the live run), a spelling of one, an
    unknown UUID, or something malformed."""
    slot = st.integers(0, 63)
    known = st.builds(IdSpec, st.just("known"), slot)
    return st.one_of(
        st.builds(IdSpec, st.just("literal"), literal=unknown_uuid()),
        st.builds(IdSpec, st.just("literal"), literal=malformed_id()),
        known,
        known,
        st.just(IdSpec("last")),
        st.builds(IdSpec, st.just("variant"), slot, st.sampled_from(VARIANTS)),
    )


UINT32_EDGES = (0, 1, 2, 99, 100, 101, 1000, 2**31 - 1, 2**31, 2**32 - 1)
UINT64_EDGES = (0, 1, 2, 3, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1)


def uint32() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(UINT32_EDGES), st.integers(0, 2**32 - 1))


def uint64() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(UINT64_EDGES), st.integers(0, 2**64 - 1))


def enum_value() -> st.SearchStrategy[int]:
    """RunStatus values and numbers no RunStatus has (enums are int32 on the wire)."""
    return st.one_of(
        st.integers(0, 9),
        st.sampled_from((10, 999, -1, -(2**31), 2**31 - 1)),
        st.integers(-(2**31), 2**31 - 1),
    )


# --- raw bytes -----------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    n &= 2**64 - 1
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


CORRUPT = {
    "invalid tag": b"\xff\xff\xff",
    "truncated varint": b"\x08",
    "length past the end": b"\x0a\x05ab",
    "bad wire type": b"\x0f\x00",
    "invalid UTF-8 string": b"\x0a\x02\xc3\x28",
    "encoded surrogate": b"\x0a\x03\xed\xa0\x80",
    "length 4 GiB": b"\x0a\xff\xff\xff\xff\x0f",
    "length 2**64-1": b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    "11-byte varint": b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    "10,000 nested groups": b"\x0b" * 10_000,
    "50 nested groups, closed": b"\x0b" * 50 + b"\x0c" * 50,
    "end group alone": b"\x0c",
    "field number 0": b"\x00",
    "largest field number": b"\xf8\xff\xff\xff\x0f\x00",
    "20,000 empty submessages (field 3)": b"\x1a\x00" * 20_000,
    "5,000 submessages (field 2)": b"\x12\x02\x08\x01" * 5_000,
    "1 MiB of NUL in field 1": b"\x0a" + varint(1 << 20) + b"\x00" * (1 << 20),
    "field 1 past the 4 MiB limit": b"\x0a"
    + varint(MAX_RECEIVE_BYTES + 1)
    + b"\x00" * (MAX_RECEIVE_BYTES + 1),
}

MUTATIONS = ("cut", "flip", "around", "unknown field", "doubled")


@dataclass(frozen=True)
class RawSpec:
    """A request body: `bytes` as drawn, a `corrupt` one by name, or a `mutation` of a valid
    encoding (chosen at run time, so a slot picks it)."""

    kind: str
    data: bytes = b""
    name: str = ""
    slot: int = 0
    position: int = 0
    byte: int = 0
    field: int = 16

    def build(self, valid: Sequence[bytes]) -> bytes:
        if self.kind == "bytes":
            return self.data
        if self.kind == "corrupt":
            return CORRUPT[self.name]
        base = valid[self.slot % len(valid)]
        at = self.position % (len(base) + 1)
        match self.name:
            case "cut":
                return base[:at]
            case "flip":
                return base[:at] + bytes([self.byte]) + base[at + 1 :]
            case "around":
                return self.data[: len(self.data) // 2] + base + self.data[len(self.data) // 2 :]
            case "unknown field":
                return base + varint(self.field << 3 | 2) + varint(len(self.data)) + self.data
            case _:
                return base + base

    def __repr__(self) -> str:
        if self.kind == "bytes":
            return f"RawSpec(bytes={short(self.data)})"
        if self.kind == "corrupt":
            return f"RawSpec(corrupt={self.name!r})"
        return (
            f"RawSpec({self.name}, slot={self.slot}, position={self.position}, "
            f"byte={self.byte}, field={self.field}, data={short(self.data)})"
        )


def raw_bytes() -> st.SearchStrategy[RawSpec]:
    """Arbitrary request bodies, named corrupt ones, and mutations of valid encodings."""
    mutation = st.builds(
        RawSpec,
        st.just("mutation"),
        data=st.binary(max_size=16),
        name=st.sampled_from(MUTATIONS),
        slot=st.integers(0, 63),
        position=st.integers(0, 2**16),
        byte=st.integers(0, 255),
        field=st.integers(16, 2**29 - 1),
    )
    return st.one_of(
        st.builds(RawSpec, st.just("bytes"), st.binary(max_size=64)),
        st.builds(RawSpec, st.just("bytes"), st.binary(min_size=64, max_size=2048)),
        st.builds(RawSpec, st.just("corrupt"), name=st.sampled_from(sorted(CORRUPT))),
        mutation,
        mutation,
        st.just(RawSpec("bytes")),
    )
