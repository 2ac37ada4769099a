"""Exact arithmetic on a parsed expression (never eval): + - * / // % ** and parentheses."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from fractions import Fraction

MAX_EXPRESSION_CHARS = 1000
MAX_EXPONENT = 1000
MAX_DIGITS = 10_000

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: operator.mod,
}


class CalculationError(ValueError):
    """The expression is not something the calculator computes."""


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise CalculationError(f"cannot parse {expression!r} as arithmetic") from None
    return _eval(tree.body)


def format_value(value: Fraction) -> str:
    """Integers as integers, terminating fractions as exact decimals, others as n/d (≈ …)."""
    if value.denominator == 1:
        return str(value.numerator)
    rest, places = value.denominator, 0
    for prime in (2, 5):
        count = 0
        while rest % prime == 0:
            rest //= prime
            count += 1
        places = max(places, count)
    if rest == 1:
        scaled = abs(value.numerator) * 10**places // value.denominator
        digits = str(scaled).rjust(places + 1, "0")
        sign = "-" if value < 0 else ""
        return f"{sign}{digits[:-places]}.{digits[-places:]}"
    approx = Decimal(value.numerator) / Decimal(value.denominator)
    return f"{value.numerator}/{value.denominator} (≈ {approx:.15g})"


def _eval(node: ast.AST) -> Fraction:
    match node:
        case ast.Constant(value=bool()):
            raise CalculationError("booleans are not numbers here")
        case ast.Constant(value=int() | float() as number):
            return _number(repr(number))
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand)
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return _eval(operand)
        case ast.BinOp(left=left, op=ast.Pow(), right=right):
            return _power(_eval(left), _eval(right))
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
            a, b = _eval(left), _eval(right)
            if b == 0 and isinstance(op, ast.Div | ast.FloorDiv | ast.Mod):
                raise CalculationError("division by zero")
            return _bounded(_BINARY[type(op)](a, b))
    raise CalculationError(
        f"unsupported element {ast.unparse(node)!r}; use numbers and + - * / // % **"
    )


def _number(text: str) -> Fraction:
    try:
        return Fraction(Decimal(text))
    except (InvalidOperation, ValueError):
        raise CalculationError(f"not a finite number: {text}") from None


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculationError("only whole-number exponents are exact")
    if abs(exponent.numerator) > MAX_EXPONENT:
        raise CalculationError(f"exponents are limited to ±{MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculationError("division by zero")
    return _bounded(base**exponent.numerator)


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_DIGITS * 3.33:
        raise CalculationError(f"result has more than about {MAX_DIGITS} digits")
    return value
