"""Label and field selectors with the apiserver's grammar and matching rules.

Label selectors follow `k8s.io/apimachinery/pkg/labels`: comma-separated requirements, each one of
`key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`, `key>n`, `key<n`.
`!=` and `notin` also match objects that do not carry the key at all.
Field selectors are `path=value`, `path==value` or `path!=value` terms on dotted object paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
    "selector_from_label_selector_object",
]


class SelectorError(ValueError):
    """A selector that does not parse; the server answers it with 400 BadRequest."""


_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _key_error(key: str) -> str | None:
    prefix, sep, name = key.rpartition("/")
    if sep and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_RE.match(name):
        return _NAME_MSG
    return None


def _value_error(value: str) -> str | None:
    if value == "":
        return None
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _NAME_RE.match(value):
        return _VALUE_MSG
    return None


@dataclass(frozen=True)
class Requirement:
    """One label requirement; operator is one of =, !=, in, notin, exists, !, gt, lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict) -> bool:
        op = self.operator
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return self.key not in labels or labels[self.key] not in self.values
        # gt / lt compare integers; a missing or non-numeric label never matches.
        try:
            have = int(labels[self.key])
        except (KeyError, TypeError, ValueError):
            return False
        want = int(self.values[0])
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return "!" + self.key
        if op in ("in", "notin"):
            return "%s %s (%s)" % (self.key, op, ",".join(self.values))
        symbol = {"gt": ">", "lt": "<"}.get(op, op)
        return self.key + symbol + self.values[0]


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; `nothing=True` is the selector that matches no object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.nothing

    def matches(self, labels: dict | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _requirement(key: str, op: str, values: list[str]) -> Requirement:
    problem = _key_error(key)
    if problem:
        raise SelectorError('unable to parse requirement: key: Invalid value: "%s": %s' % (key, problem))
    if op in ("in", "notin") and not values:
        raise SelectorError(
            "unable to parse requirement: values: Invalid value: []: "
            "for 'in', 'notin' operators, values set can't be empty"
        )
    if op in ("=", "!=") and len(values) != 1:
        raise SelectorError(
            "unable to parse requirement: values: exact-match compatibility requires one value"
        )
    if op in ("gt", "lt"):
        if len(values) != 1 or not re.fullmatch(r"-?[0-9]+", values[0]):
            raise SelectorError(
                "unable to parse requirement: values[0]: Invalid value: %r: "
                "for 'Gt', 'Lt' operators, the value must be an integer" % (values[0] if values else "")
            )
        return Requirement(key, op, tuple(values))
    for i, value in enumerate(values):
        problem = _value_error(value)
        if problem:
            raise SelectorError(
                'unable to parse requirement: values[%d][%s]: Invalid value: "%s": %s'
                % (i, key, value, problem)
            )
    return Requirement(key, op, tuple(sorted(set(values))))


# Tokens: "ident", "op" (one of ! = == != < > in notin), "(", ")", ",", "end".
_SPECIAL = set(" \t\n\r!=,()<>")


def _lex(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "(),":
            tokens.append((ch, ch))
            i += 1
        elif ch in "!=<>":
            two = text[i : i + 2]
            if two in ("==", "!="):
                tokens.append(("op", two))
                i += 2
            else:
                tokens.append(("op", ch))
                i += 1
        else:
            j = i
            while j < n and text[j] not in _SPECIAL:
                j += 1
            word = text[i:j]
            tokens.append(("op", word) if word in ("in", "notin") else ("ident", word))
            i = j
    tokens.append(("end", ""))
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def take(self) -> tuple[str, str]:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def fail(self, found: str, expected: str) -> SelectorError:
        return SelectorError("found '%s', expected: %s" % (found or "end of string", expected))

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        if self.peek()[0] == "end":
            return reqs
        while True:
            reqs.append(self.requirement())
            kind, value = self.take()
            if kind == "end":
                return reqs
            if kind != ",":
                raise self.fail(value, "',' or 'end of string'")
            if self.peek()[0] == "end":
                raise self.fail("", "identifier after ','")

    def requirement(self) -> Requirement:
        kind, value = self.take()
        negated = kind == "op" and value == "!"
        if negated:
            kind, value = self.take()
        if kind != "ident":
            raise self.fail(value, "!, identifier, or 'end of string'")
        key = value
        if self.peek()[0] in (",", "end"):
            return _requirement(key, "!" if negated else "exists", [])
        if negated:
            raise self.fail(self.peek()[1], "',' or 'end of string' after '!%s'" % key)
        kind, op = self.take()
        if kind != "op" or op == "!":
            raise self.fail(op, "in, notin, =, ==, !=, gt, lt")
        if op in ("in", "notin"):
            return _requirement(key, op, self.value_set())
        value = self.exact_value()
        canonical = {"==": "=", ">": "gt", "<": "lt"}.get(op, op)
        return _requirement(key, canonical, [value])

    def exact_value(self) -> str:
        kind, value = self.peek()
        if kind in (",", "end"):
            return ""
        self.take()
        if kind == "ident" or (kind == "op" and value in ("in", "notin")):
            return value
        raise self.fail(value, "identifier")

    def value_set(self) -> list[str]:
        kind, value = self.take()
        if kind != "(":
            raise self.fail(value, "'('")
        values: list[str] = []
        expect_value = True
        while True:
            kind, value = self.take()
            if kind == ")":
                if expect_value and values:
                    values.append("")
                return values
            if kind == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if kind == "end":
                raise self.fail("", "')'")
            if not expect_value:
                raise self.fail(value, "',' or ')'")
            values.append(value)
            expect_value = False


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the `labelSelector` query parameter; an empty string selects everything."""
    return LabelSelector(tuple(_Parser(text or "").parse()))


def selector_from_label_selector_object(sel: dict | None) -> LabelSelector:
    """Convert a metav1.LabelSelector object. As in the apiserver, None selects nothing and {} all."""
    if sel is None:
        return LabelSelector(nothing=True)
    reqs: list[Requirement] = []
    for key, value in sorted((sel.get("matchLabels") or {}).items()):
        reqs.append(_requirement(key, "=", [str(value)]))
    for expr in sel.get("matchExpressions") or []:
        key = expr.get("key", "")
        values = [str(v) for v in expr.get("values") or []]
        operator = expr.get("operator")
        if operator in ("In", "NotIn"):
            reqs.append(_requirement(key, "in" if operator == "In" else "notin", values))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                raise SelectorError(
                    "values: Invalid value: %r: values set must be empty for exists and does not exist"
                    % values
                )
            reqs.append(_requirement(key, "exists" if operator == "Exists" else "!", []))
        else:
            raise SelectorError('"%s" is not a valid label selector operator' % operator)
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    operator: str  # "=" or "!="
    value: str

    def matches(self, obj: dict) -> bool:
        equal = field_value(obj, self.path) == self.value
        return equal if self.operator == "=" else not equal


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def fields(self) -> list[str]:
        return [r.path for r in self.requirements]

    def matches(self, obj: dict) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join("%s%s%s" % (r.path, r.operator, r.value) for r in self.requirements)


def field_value(obj: dict, path: str) -> str:
    """The string form the apiserver compares: missing fields are "", booleans are true/false."""
    current = obj
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return ""
        current = current[part]
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, buf, escaped = [], [], False
    for ch in text:
        if escaped:
            buf.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    if escaped:
        buf.append("\\")
    parts.append("".join(buf))
    return parts


def _unescape(text: str, term: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=!":
                raise SelectorError("invalid field selector: invalid escape sequence in %r" % term)
            out.append(text[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _find_operator(term: str) -> tuple[int, str] | None:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return i, op
        i += 1
    return None


def parse_field_selector(text: str) -> FieldSelector:
    """Parse the `fieldSelector` query parameter (`a=b,c!=d`, backslash escapes `\\,` `\\=` `\\\\`)."""
    reqs: list[FieldRequirement] = []
    if not (text or "").strip():
        return FieldSelector(())
    for term in _split_unescaped(text, ","):
        found = _find_operator(term)
        if found is None:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (text, term))
        index, op = found
        path = _unescape(term[:index].strip(), term)
        value = _unescape(term[index + len(op) :].strip(), term)
        if not path:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (text, term))
        reqs.append(FieldRequirement(path, "!=" if op == "!=" else "=", value))
    return FieldSelector(tuple(reqs))
